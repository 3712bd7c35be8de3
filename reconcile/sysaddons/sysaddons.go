// Package sysaddons: PLACEHOLDER until the renderer lands (branch addon-render).
package sysaddons

import (
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/spec"
)

// NetworkPluginAddon is the network plugin's add-on.
const NetworkPluginAddon = "rke-network-plugin"

// Render is a placeholder.
func Render(c *spec.Cluster) ([]addons.Addon, error) { return nil, nil }
