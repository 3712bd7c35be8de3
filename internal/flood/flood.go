// Package flood makes the endless answers a hostile node sends, for the
// tests and simulations of rigger's bounds on what it reads: a text
// repeated for ever, and lines written one after another for ever.
package flood

import (
	"bytes"
	"fmt"
	"io"
)

// Repeat reads as s, for ever.
func Repeat(s string) io.Reader { return &repeated{s: s} }

type repeated struct {
	s   string
	off int
}

func (r *repeated) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// Sequence reads as format written with 0, 1, 2, … in turn (its one verb),
// for ever: JSON members "0":"","1":"", or progress messages of ever new
// layers.
func Sequence(format string) io.Reader { return &sequence{format: format} }

type sequence struct {
	format string
	i      int
	buf    bytes.Buffer
}

func (s *sequence) Read(p []byte) (int, error) {
	for s.buf.Len() < len(p) {
		fmt.Fprintf(&s.buf, s.format, s.i)
		s.i++
	}
	return s.buf.Read(p)
}
