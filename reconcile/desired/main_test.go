package desired

import (
	"os"
	"testing"

	"github.com/rigger/rigger/internal/nodebin"
)

// pretendBinary is rigger's own binary as these tests see it, so that the
// golden files do not depend on the binary that runs them.
var pretendBinary = nodebin.Binary{Path: "/usr/local/bin/rigger", ID: "pretend-build-id", Arch: "amd64"}

func TestMain(m *testing.M) {
	nodebin.Pretend(pretendBinary)
	os.Exit(m.Run())
}
