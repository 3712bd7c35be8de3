package agenttun_test

import (
	"testing"

	"github.com/rigger/rigger/transport/agenttun"
	"github.com/rigger/rigger/transport/agenttun/backendtest"
)

func newDir(t *testing.T) agenttun.Backend {
	d, err := agenttun.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDirBackend(t *testing.T) {
	backendtest.Run(t, newDir)
	backendtest.RunStores(t, newDir)
}

func TestMemoryBackend(t *testing.T) {
	backendtest.Run(t, func(*testing.T) agenttun.Backend { return agenttun.NewMemory() })
	backendtest.RunStores(t, func(*testing.T) agenttun.Backend { return agenttun.NewMemory() })
}
