package sshtun

import (
	"testing"

	"github.com/rigger/rigger/transport/internal/testnode"
	"github.com/rigger/rigger/transport/transporttest"
)

func TestConformanceInProcess(t *testing.T) {
	transporttest.TestConformance(t, func(t *testing.T) transporttest.Target {
		n := startNode(t, nodeOptions{})
		return transporttest.Target{
			Transport:  newT(t, n.config()),
			Node:       "n1",
			EchoAddr:   n.echo,
			ClosedAddr: testnode.ClosedAddr(t),
			Container:  n.docker.Container,
		}
	})
}
