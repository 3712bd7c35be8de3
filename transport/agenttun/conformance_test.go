package agenttun

import (
	"testing"

	"github.com/rigger/rigger/transport/internal/testnode"
	"github.com/rigger/rigger/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.TestConformance(t, func(t *testing.T) transporttest.Target {
		n := startNode(t)
		ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
		closed := testnode.ClosedAddr(t)
		cfg := ts.agentConfig(t, "n1", n)
		cfg.AllowPorts = append(cfg.AllowPorts, port(t, closed))
		runAgent(t, cfg)
		return transporttest.Target{
			Transport:  ts.srv,
			Node:       "n1",
			EchoAddr:   n.echo,
			ClosedAddr: closed,
			Container:  n.docker.Container,
		}
	})
}
