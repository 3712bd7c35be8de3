// Package nodebin is the rigger binary that rigger copies into a container
// on a node, to run rigger there in an image the node already has: the
// etcd-rolling-snapshots container runs it in RKE's rke-tools image
// (system_images.alpine) when cluster.yml names no image of rigger's.
//
// The binary is the running rigger's own executable unless Use names
// another (the tests, which run rigger's packages in a test binary, name a
// rigger built from the same source). It must be a static Linux ELF file:
// the images it runs in have no libraries to link against.
package nodebin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Binary is a rigger binary that can run on a node.
type Binary struct {
	// Path is the file.
	Path string
	// ID is the content part of its Go build ID: it changes with every
	// change of the binary, and two builds of the same source by the same
	// Go (make build's -trimpath) agree on it.
	ID string
	// Arch is the Go architecture it runs on (amd64, arm64, …), as Docker
	// names an image's.
	Arch string
}

var (
	mu     sync.Mutex
	path   string // "": the running executable
	cached *result
)

// runningExe is the running executable on Linux, whatever became of its
// file since it started.
const runningExe = "/proc/self/exe"

type result struct {
	b       Binary
	err     error
	pretend bool
}

// Use makes path the binary copied to the nodes from now on; "" is the
// running executable.
func Use(p string) {
	mu.Lock()
	defer mu.Unlock()
	path, cached = p, nil
}

// Pretend makes Get return b (and Open fail) from now on, for tests whose
// results must not depend on the binary that runs them; Use ends it.
func Pretend(b Binary) {
	mu.Lock()
	defer mu.Unlock()
	path, cached = "", &result{b: b, pretend: true}
}

// Get returns the binary copied to the nodes, read once; the error says
// why it cannot run on a node and what to do.
func Get() (Binary, error) {
	mu.Lock()
	defer mu.Unlock()
	if cached == nil {
		f, b, err := open()
		if f != nil {
			f.Close()
		}
		cached = &result{b: b, err: err}
	}
	return cached.b, cached.err
}

// Open opens the binary copied to the nodes for the copy, and returns
// what it is read from the open file: an ID that differs from Get's means
// that the file was replaced since.
func Open() (*os.File, Binary, error) {
	mu.Lock()
	defer mu.Unlock()
	return open()
}

func open() (*os.File, Binary, error) {
	if cached != nil && cached.pretend {
		return nil, Binary{}, errors.New("rigger's own binary cannot run on the nodes: a test pretends to be it (nodebin.Pretend)")
	}
	p, file := path, path
	if p == "" {
		var err error
		if p, err = os.Executable(); err != nil {
			return nil, Binary{}, fmt.Errorf("rigger's own binary cannot run on the nodes: %w", err)
		}
		// The running binary itself, also once its file was replaced (an
		// upgrade in place, serve still running the old one): what was
		// planned with is what is copied, for the process's life.
		file = p
		if _, err := os.Stat(runningExe); err == nil {
			file = runningExe
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, Binary{}, fmt.Errorf("rigger's own binary cannot run on the nodes: %w", err)
	}
	b, err := read(f, p)
	if err != nil {
		f.Close()
		return nil, Binary{}, fmt.Errorf("rigger's own binary cannot run on the nodes: %w", err)
	}
	return f, b, nil
}

// read checks that r, the file p, is a static Linux ELF executable built
// by Go and returns what Binary says of it.
func read(r io.ReaderAt, p string) (Binary, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return Binary{}, fmt.Errorf("%s: %w", p, err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return Binary{}, fmt.Errorf("%s is dynamically linked, and the images it runs in on the nodes have no libraries: build rigger with `make build` (CGO_ENABLED=0)", p)
		}
	}
	arch, ok := goArch(f)
	if !ok {
		return Binary{}, fmt.Errorf("%s is built for ELF machine %s, which rigger does not run on", p, f.Machine)
	}
	id, err := buildID(f)
	if err != nil {
		return Binary{}, fmt.Errorf("%s: %w", p, err)
	}
	return Binary{Path: p, ID: id, Arch: arch}, nil
}

// goArch is the Go architecture of f's machine.
func goArch(f *elf.File) (string, bool) {
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", true
	case elf.EM_AARCH64:
		return "arm64", true
	case elf.EM_386:
		return "386", true
	case elf.EM_ARM:
		return "arm", true
	case elf.EM_PPC64:
		if f.ByteOrder == binary.LittleEndian {
			return "ppc64le", true
		}
		return "ppc64", true
	case elf.EM_S390:
		return "s390x", true
	case elf.EM_RISCV:
		return "riscv64", true
	}
	return "", false
}

// maxNote bounds the note section read: Go's is under 100 bytes.
const maxNote = 4 << 10

// buildID returns the content part (the last) of the Go build ID in f's
// .note.go.buildid section: a note named "Go" of type 4, whose description
// is the build ID.
func buildID(f *elf.File) (string, error) {
	none := errors.New("no Go build ID: not a binary built by Go")
	s := f.Section(".note.go.buildid")
	if s == nil || s.Size > maxNote {
		return "", none
	}
	data, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("read its Go build ID: %w", err)
	}
	for len(data) >= 12 {
		nameSize, descSize, typ := f.ByteOrder.Uint32(data), f.ByteOrder.Uint32(data[4:]), f.ByteOrder.Uint32(data[8:])
		data = data[12:]
		name, rest, ok := take(data, nameSize)
		if !ok {
			break
		}
		desc, rest, ok := take(rest, descSize)
		if !ok {
			break
		}
		data = rest
		if typ == 4 && string(bytes.TrimRight(name, "\x00")) == "Go" {
			id := string(desc)
			if i := strings.LastIndexByte(id, '/'); i >= 0 {
				id = id[i+1:]
			}
			if id == "" {
				break
			}
			return id, nil
		}
	}
	return "", none
}

// take splits n bytes off data, and the padding to a multiple of 4 after
// them.
func take(data []byte, n uint32) (field, rest []byte, ok bool) {
	padded := (uint64(n) + 3) &^ 3
	if padded > uint64(len(data)) {
		return nil, nil, false
	}
	return data[:n], data[padded:], true
}
