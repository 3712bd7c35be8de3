package etcdsnap

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/minio/minio-go/v7"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap/s3test"
	"github.com/rigger/rigger/spec"
)

// nodeFiles is a node's Docker engine as far as reading a file through a
// helper container goes (dockerop.OpenFile, which S3 uploads stream
// from): the node's snapshot directory Dir is the directory dir. Any
// other call panics (the embedded Engine is nil). A stalled node sends
// nothing until the read is given up.
type nodeFiles struct {
	dockerop.Engine
	dir     string
	stalled bool
}

func (n nodeFiles) ImageInspect(context.Context, string, ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{}, nil
}

func (n nodeFiles) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	return container.CreateResponse{ID: "helper"}, nil
}

func (n nodeFiles) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	return nil
}

// CopyFromContainer gives the file Dir/<name> as the archive API does: a
// tar of that one file.
func (n nodeFiles) CopyFromContainer(ctx context.Context, _ string, p string) (io.ReadCloser, container.PathStat, error) {
	if n.stalled {
		<-ctx.Done()
		return nil, container.PathStat{}, ctx.Err()
	}
	if path.Dir(p) != Dir {
		return nil, container.PathStat{}, errors.New("not in " + Dir + ": " + p)
	}
	b, err := os.ReadFile(filepath.Join(n.dir, path.Base(p)))
	if err != nil {
		return nil, container.PathStat{}, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Base(p), Mode: 0o600, Size: int64(len(b))}); err != nil {
		return nil, container.PathStat{}, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, container.PathStat{}, err
	}
	if err := tw.Close(); err != nil {
		return nil, container.PathStat{}, err
	}
	return io.NopCloser(&buf), container.PathStat{Name: path.Base(p), Size: int64(len(b))}, nil
}

// TestScheduledUploadsWhatS3Missed: a scheduled snapshot taken while the
// S3 server (versitygw) is down stays on the etcd nodes only, and the
// schedule reports it as not in S3; once S3 answers again, the next run
// uploads it from a node, verified against its sidecar's sha256, and
// reports nothing missing; the run after that sends nothing again. A copy
// whose content is not the sidecar's is never uploaded: the next node's
// copy is, and with none good the snapshot stays reported as not in S3.
// The runs are Scheduled's S3 step (listed, uploadMissing, notInS3), with
// the nodes' snapshot directories in temporary directories.
func TestScheduledUploadsWhatS3Missed(t *testing.T) {
	gw := s3test.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := &spec.S3BackupConfig{Endpoint: gw.Endpoint, Region: "us-east-1", BucketName: gw.Bucket, Folder: "catch-up",
		AccessKey: gw.Access, SecretKey: gw.Secret, CustomCA: gw.CAPEM}
	on := true
	dirs := map[string]string{"10.0.0.1": t.TempDir(), "10.0.0.2": t.TempDir(), "10.0.0.3": t.TempDir()}
	cl := &Cluster{
		Name:   "c",
		Backup: &spec.BackupConfig{Enabled: &on, IntervalHours: 1, Retention: 2, Timeout: 60, S3BackupConfig: cfg},
		Engine: func(_ context.Context, node string) (dockerop.Engine, error) {
			return nodeFiles{dir: dirs[node], stalled: node == "10.0.0.3"}, nil
		},
		HelperImage: "alpine",
		Log:         slog.New(slog.DiscardHandler),
	}
	store, err := NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store.Retry = Retry{Attempts: 2, First: 10 * time.Millisecond, Max: 10 * time.Millisecond}

	t0 := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	// put writes a snapshot of content to the nodes (content[i] on the
	// i-th of them) and returns it as a listing of the nodes finds it: its
	// sidecar has the sha256 of good.
	put := func(name, good string, at time.Time, content map[string]string) Info {
		t.Helper()
		sum := sha256.Sum256([]byte(good))
		si := Info{Name: name, TakenAt: at, Size: int64(len(good)), Sidecar: &Sidecar{
			Format: SidecarFormat, Name: name, Kind: KindScheduled, Node: "10.0.0.1", TakenAt: at,
			Size: int64(len(good)), SHA256: hex.EncodeToString(sum[:]), Cluster: ClusterState{ClusterName: "c"}}}
		for node, c := range content {
			if err := os.WriteFile(filepath.Join(dirs[node], name), []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
			si.Nodes = append(si.Nodes, node)
		}
		slices.Sort(si.Nodes)
		return si
	}
	// run is Scheduled's S3 step on the snapshots found on the nodes: S3
	// is listed (what it holds sets their S3); when it answers, what it
	// lacks is uploaded.
	run := func(snaps []Info) (uploaded, missing []string, listErr, upErr error) {
		t.Helper()
		objs, listErr := store.List(ctx)
		for i := range snaps {
			snaps[i].S3 = ""
			for _, o := range objs {
				if o.Name == snaps[i].Name {
					snaps[i].S3 = store.Where(o.Name)
				}
			}
		}
		if listErr == nil {
			uploaded, upErr = cl.uploadMissing(ctx, store, snaps)
		}
		return uploaded, notInS3(snaps), listErr, upErr
	}
	// inS3 is the snapshot's content in S3 and its sidecar there, with
	// the object's ETag; "" when it is not there.
	inS3 := func(name string) (content string, sc *Sidecar, etag string) {
		t.Helper()
		obj, err := gw.Client.GetObject(ctx, gw.Bucket, store.Key(name), minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		st, err := obj.Stat()
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return "", nil, ""
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		sc, err = store.Sidecar(ctx, name)
		if err != nil {
			t.Fatalf("%s is in s3 without its sidecar: %v", name, err)
		}
		return string(b), sc, st.ETag
	}

	// S3 is down when the scheduled snapshot is taken: Save's upload
	// fails, the snapshot is on both nodes.
	gw.Stop()
	const good1 = "snapshot one, on both nodes"
	s1 := put(Name(KindScheduled, t0, false), good1, t0, map[string]string{"10.0.0.1": good1, "10.0.0.2": good1})
	if err := store.Upload(ctx, s1.Sidecar, cl.openOn("10.0.0.1", s1.Name)); err == nil {
		t.Fatal("upload with S3 down succeeded")
	}
	snaps := []Info{s1}
	uploaded, missing, listErr, _ := run(snaps)
	if listErr == nil || len(uploaded) > 0 || !slices.Equal(missing, []string{s1.Name}) {
		t.Fatalf("S3 down: listed %v, uploaded %v, not in s3 %v; want a list error and %s not in s3", listErr, uploaded, missing, s1.Name)
	}

	// S3 answers again; the next run (an hour later, the next scheduled
	// snapshot's) uploads the one it missed.
	gw.Restart()
	testwait.ForContext(ctx, t, 30*time.Second, "versitygw answering again", func(ctx context.Context) error {
		_, err := store.List(ctx)
		return err
	})
	uploaded, missing, listErr, upErr := run(snaps)
	if listErr != nil || upErr != nil || !slices.Equal(uploaded, []string{s1.Name}) || len(missing) > 0 {
		t.Fatalf("S3 back: listed %v, upload %v, uploaded %v, not in s3 %v; want %s uploaded, nothing missing", listErr, upErr, uploaded, missing, s1.Name)
	}
	content, sc, etag := inS3(s1.Name)
	if content != good1 || sc == nil || sc.SHA256 != s1.Sidecar.SHA256 || sc.Name != s1.Name {
		t.Fatalf("in s3: %q with sidecar %+v; want %q and its sidecar", content, sc, good1)
	}

	// The next run sends nothing again.
	uploaded, missing, listErr, upErr = run(snaps)
	if listErr != nil || upErr != nil || len(uploaded) > 0 || len(missing) > 0 {
		t.Fatalf("again: listed %v, upload %v, uploaded %v, not in s3 %v; want nothing done", listErr, upErr, uploaded, missing)
	}
	if _, _, again := inS3(s1.Name); again != etag {
		t.Errorf("%s was uploaded again (etag %s, was %s)", s1.Name, again, etag)
	}

	// A damaged copy is not uploaded: the other node's good one is; with
	// no good copy, nothing is, and the snapshot stays reported.
	const good2, good3 = "snapshot two", "snapshot three"
	s2 := put(Name(KindScheduled, t0.Add(time.Hour), false), good2, t0.Add(time.Hour),
		map[string]string{"10.0.0.1": "snapshot tw0", "10.0.0.2": good2})
	s3 := put(Name(KindScheduled, t0.Add(2*time.Hour), false), good3, t0.Add(2*time.Hour),
		map[string]string{"10.0.0.1": "snapshot thr3e", "10.0.0.2": "snapshot thre3"})
	snaps = append(snaps, s2, s3)
	uploaded, missing, listErr, upErr = run(snaps)
	var ue *UploadError
	if listErr != nil || !errors.As(upErr, &ue) || ue.Name != s3.Name || !strings.Contains(upErr.Error(), "sha256") {
		t.Errorf("damaged copies: listed %v, upload %v; want an *UploadError of %s that names the sha256", listErr, upErr, s3.Name)
	}
	if !slices.Equal(uploaded, []string{s2.Name}) || !slices.Equal(missing, []string{s3.Name}) {
		t.Errorf("damaged copies: uploaded %v, not in s3 %v; want %s uploaded from its good copy, %s not in s3", uploaded, missing, s2.Name, s3.Name)
	}
	if content, _, _ := inS3(s2.Name); content != good2 {
		t.Errorf("%s in s3 is %q, want the good copy %q", s2.Name, content, good2)
	}
	if content, _, _ := inS3(s3.Name); content != "" {
		t.Errorf("%s, with no good copy, is in s3: %q", s3.Name, content)
	}

	// The uploads of a run are bounded by backup_config.timeout: a node
	// that sends nothing holds the run that long, and what is left waits
	// for the next run.
	cl.Backup.Timeout = 1
	const good4 = "snapshot four"
	s4 := put(Name(KindScheduled, t0.Add(3*time.Hour), false), good4, t0.Add(3*time.Hour), map[string]string{"10.0.0.3": good4})
	snaps = append(snaps, s4)
	uploaded, missing, listErr, upErr = run(snaps)
	if listErr != nil || !errors.As(upErr, &ue) || ue.Name != s4.Name || !strings.Contains(upErr.Error(), "1 snapshot(s) s3 lacks: left for the next run") {
		t.Errorf("a stalled node: listed %v, upload %v; want an *UploadError of %s, and %s left for the next run", listErr, upErr, s4.Name, s3.Name)
	}
	if len(uploaded) > 0 || !slices.Equal(missing, []string{s3.Name, s4.Name}) {
		t.Errorf("a stalled node: uploaded %v, not in s3 %v; want none uploaded, %s and %s not in s3", uploaded, missing, s3.Name, s4.Name)
	}
}
