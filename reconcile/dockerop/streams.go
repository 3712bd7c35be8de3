package dockerop

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rigger/rigger/internal/clip"
)

// The streams a node's engine answers with are read here as they come,
// keeping nothing but what the caller asked for: the engine, like any
// answer of a node, is not trusted to keep them small (the transport
// bounds each message of a progress stream and the stream itself).

// maxNodeMessage bounds an error message of a node's engine quoted in an
// error rigger reports.
const maxNodeMessage = 1 << 10

// drainPull reads a pull's progress stream to its end; the engine reports
// a failed pull as an error message inside the stream. Each message is
// decoded on its own and only its error kept: neither the progress of the
// layers nor their ids (Docker's jsonmessage keeps a map of every id it
// sees).
func drainPull(rc io.ReadCloser) error {
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&m)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("read the pull's progress: %w", err)
		case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
			return errors.New(clip.Ellipsis(m.ErrorDetail.Message, maxNodeMessage))
		case m.Error != "":
			return errors.New(clip.Ellipsis(m.Error, maxNodeMessage))
		}
	}
}

// maxLogFrame bounds one frame of a log stream: the engine writes a frame
// per write of the container's process, of at most 16 KiB with Docker's
// log drivers.
const maxLogFrame = 1 << 20

// demux copies the multiplexed stream r of a container without a TTY
// (its logs: 8 bytes of header, the stream and the size, before each
// frame) to stdout and stderr, frame by frame, as Docker's stdcopy does,
// but without taking a frame's size on trust: stdcopy makes a buffer of
// whatever size a header says, up to 4 GiB.
func demux(stdout, stderr io.Writer, r io.Reader) error {
	var h [8]byte
	for {
		if _, err := io.ReadFull(r, h[:]); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the container's output: %w", err)
		}
		size := binary.BigEndian.Uint32(h[4:])
		if size > maxLogFrame {
			return fmt.Errorf("read the container's output: a frame of %d bytes, more than the %d an engine writes", size, maxLogFrame)
		}
		var w io.Writer
		switch h[0] {
		case 0, 1:
			w = stdout
		case 2:
			w = stderr
		case 3: // the engine's own error
			msg, err := io.ReadAll(io.LimitReader(r, int64(size)))
			if err != nil {
				return fmt.Errorf("read the container's output: %w", err)
			}
			return fmt.Errorf("the engine reports an error in the container's output: %s", clip.Ellipsis(string(msg), maxNodeMessage))
		default:
			return fmt.Errorf("read the container's output: stream %d in a frame's header, which no engine writes", h[0])
		}
		if _, err := io.CopyN(w, r, int64(size)); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
}
