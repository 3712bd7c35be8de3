// Package sysaddons: PLACEHOLDER until the renderer lands (branch addon-render).
package sysaddons

import (
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/spec"
)

// NetworkPlugin is the network plugin's add-on.
const NetworkPlugin = "rke-network-plugin"

// Render is a placeholder.
func Render(c *spec.Cluster) ([]addons.Addon, error) { return nil, nil }
