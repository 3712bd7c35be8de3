package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// A minimal client of the Kubernetes CRI (runtime.v1) over a Unix socket:
// gRPC is HTTP/2 without TLS, and the standard library speaks that. It
// makes the calls the sandbox and its tests need to see that a node's
// containerd answers as the kubelet's runtime, without a gRPC dependency.

// criTimeout bounds one CRI call.
const criTimeout = 5 * time.Second

// CRIRuntime is what a CRI runtime says of itself (runtime.v1
// VersionResponse).
type CRIRuntime struct {
	Version           string // the CRI API version, "0.1.0"
	RuntimeName       string // "containerd"
	RuntimeVersion    string
	RuntimeAPIVersion string // "v1"
}

// CRIVersion calls RuntimeService.Version on the CRI socket.
func CRIVersion(ctx context.Context, socket string) (CRIRuntime, error) {
	resp, err := criCall(ctx, socket, "/runtime.v1.RuntimeService/Version", nil)
	if err != nil {
		return CRIRuntime{}, err
	}
	f, err := protoStrings(resp)
	if err != nil {
		return CRIRuntime{}, fmt.Errorf("CRI Version: %w", err)
	}
	return CRIRuntime{Version: first(f[1]), RuntimeName: first(f[2]), RuntimeVersion: first(f[3]), RuntimeAPIVersion: first(f[4])}, nil
}

// CRIImage is what a CRI runtime holds of an image (runtime.v1 Image).
type CRIImage struct {
	ID       string
	RepoTags []string
}

// CRIImageStatus calls ImageService.ImageStatus for ref on the CRI socket.
// An image the runtime does not have is (nil, nil).
func CRIImageStatus(ctx context.Context, socket, ref string) (*CRIImage, error) {
	// ImageStatusRequest{image: ImageSpec{image: ref}}
	req := protoBytesField(1, protoBytesField(1, []byte(ref)))
	resp, err := criCall(ctx, socket, "/runtime.v1.ImageService/ImageStatus", req)
	if err != nil {
		return nil, err
	}
	f, err := protoStrings(resp)
	if err != nil {
		return nil, fmt.Errorf("CRI ImageStatus: %w", err)
	}
	if len(f[1]) == 0 {
		return nil, nil
	}
	img, err := protoStrings(f[1][0])
	if err != nil {
		return nil, fmt.Errorf("CRI ImageStatus: %w", err)
	}
	out := &CRIImage{ID: first(img[1])}
	for _, t := range img[2] {
		out.RepoTags = append(out.RepoTags, string(t))
	}
	return out, nil
}

// criCall makes one unary gRPC call: a length-prefixed message in, one
// out, the status in the trailers.
func criCall(ctx context.Context, socket, method string, msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	defer tr.CloseIdleConnections()
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("CRI %s on %s: %w", method, socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("CRI %s on %s: %w", method, socket, err)
	}
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only response (an error) has it in the headers
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if resp.StatusCode != http.StatusOK || status != "0" {
		return nil, fmt.Errorf("CRI %s on %s: HTTP %d, gRPC status %q: %s", method, socket, resp.StatusCode, status, message)
	}
	if len(data) < 5 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 || data[0] != 0 {
		return nil, fmt.Errorf("CRI %s on %s: not one uncompressed gRPC message (%d bytes)", method, socket, len(data))
	}
	return data[5:], nil
}

// protoBytesField encodes a length-delimited protobuf field.
func protoBytesField(num int, v []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// protoStrings decodes a protobuf message's length-delimited fields
// (strings, bytes, messages) by number; other fields are skipped.
func protoStrings(b []byte) (map[int][][]byte, error) {
	out := map[int][][]byte{}
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("bad protobuf tag")
		}
		b = b[n:]
		num, wire := int(tag>>3), tag&7
		switch wire {
		case 0: // varint
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, errors.New("bad protobuf varint")
			}
			b = b[n:]
		case 1: // 64-bit
			if len(b) < 8 {
				return nil, errors.New("short protobuf fixed64")
			}
			b = b[8:]
		case 5: // 32-bit
			if len(b) < 4 {
				return nil, errors.New("short protobuf fixed32")
			}
			b = b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("bad protobuf length")
			}
			out[num] = append(out[num], b[n:n+int(l)])
			b = b[n+int(l):]
		default:
			return nil, fmt.Errorf("protobuf wire type %d", wire)
		}
	}
	return out, nil
}

func first(vs [][]byte) string {
	if len(vs) == 0 {
		return ""
	}
	return string(vs[0])
}
