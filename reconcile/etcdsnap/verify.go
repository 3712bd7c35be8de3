package etcdsnap

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Status is `etcdctl snapshot status -w json` of a snapshot file.
type Status struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKeys int64  `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
}

// maxToolOutput bounds what the parsers below decode of a tool's output
// on a node: etcdctl and sha256sum print a line or two.
const maxToolOutput = 64 << 10

// checkOutputSize refuses output larger than maxToolOutput.
func checkOutputSize(tool string, out []byte) error {
	if len(out) > maxToolOutput {
		return fmt.Errorf("%s printed more than %d KiB, not what it prints: %q", tool, maxToolOutput>>10, firstLine(out))
	}
	return nil
}

// ParseStatus reads `etcdctl snapshot status -w json` and checks that it
// describes a usable snapshot: a database with keys at a revision.
func ParseStatus(out []byte) (Status, error) {
	if err := checkOutputSize("etcdctl snapshot status", out); err != nil {
		return Status{}, err
	}
	var s Status
	if err := json.Unmarshal(out, &s); err != nil {
		return Status{}, fmt.Errorf("read etcdctl snapshot status: %w: %q", err, firstLine(out))
	}
	switch {
	case s.TotalSize <= 0:
		return s, fmt.Errorf("etcdctl snapshot status: the database is empty (total size %d)", s.TotalSize)
	case s.TotalKeys <= 0:
		return s, errors.New("etcdctl snapshot status: the database holds no keys")
	case s.Revision <= 0:
		return s, fmt.Errorf("etcdctl snapshot status: revision %d", s.Revision)
	}
	return s, nil
}

// ParseEndpointVersion reads the server version from `etcdctl endpoint
// status -w json` of one endpoint.
func ParseEndpointVersion(out []byte) (string, error) {
	if err := checkOutputSize("etcdctl endpoint status", out); err != nil {
		return "", err
	}
	var st []struct {
		Endpoint string
		Status   struct {
			Version string `json:"version"`
		}
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("read etcdctl endpoint status: %w: %q", err, firstLine(out))
	}
	if len(st) != 1 || st[0].Status.Version == "" {
		return "", fmt.Errorf("etcdctl endpoint status: want the version of one endpoint, got %q", firstLine(out))
	}
	return st[0].Status.Version, nil
}

// ParseSHA256Sum reads the checksum of file from sha256sum's output
// ("<64 hex digits>  <file>").
func ParseSHA256Sum(out []byte, file string) (string, error) {
	if err := checkOutputSize("sha256sum", out); err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if ok && name == file {
			if err := checkSHA256(sum); err != nil {
				return "", fmt.Errorf("sha256sum %s: %w", file, err)
			}
			return sum, nil
		}
	}
	return "", fmt.Errorf("sha256sum printed no checksum of %s: %q", file, firstLine(out))
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 160 {
		s = strings.ToValidUTF8(s[:160], "") + "…"
	}
	return s
}
