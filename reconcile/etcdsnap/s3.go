package etcdsnap

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/spec"
)

// Retry is how an S3 operation is retried: Attempts tries in all, the
// pause doubling from First up to Max.
type Retry struct {
	Attempts   int
	First, Max time.Duration
}

// defaultRetry is what S3 uploads use: 5 tries over about 15 seconds.
func defaultRetry() Retry { return Retry{Attempts: 5, First: time.Second, Max: 8 * time.Second} }

// do runs op until it succeeds, fails permanently (a *S3Error that is not
// Temporary), ctx ends or the attempts are spent.
func (r Retry) do(ctx context.Context, op func() error) error {
	attempts := max(r.Attempts, 1)
	delay := wait.Backoff{Duration: r.First, Factor: 2, Cap: max(r.Max, r.First), Steps: math.MaxInt32}.DelayFunc()
	tries := 0
	var err error
	werr := delay.Until(ctx, true, true, func(context.Context) (bool, error) {
		tries++
		err = op()
		var se *S3Error
		return err == nil || errors.As(err, &se) && !se.Temporary || tries == attempts, nil
	})
	switch {
	case werr != nil:
		return errors.Join(err, werr)
	case err != nil && tries == attempts && attempts > 1:
		return fmt.Errorf("%w (gave up after %d attempt(s))", err, attempts)
	}
	return err
}

// S3 is a bucket folder that holds snapshots and their sidecars:
// <folder>/<name> and <folder>/<name>.json.
type S3 struct {
	cl       *minio.Client
	endpoint string
	bucket   string
	folder   string
	// secrets never appear in errors.
	secrets []string
	Retry   Retry
}

// NewS3 makes the client of services.etcd.backup_config.s3backupconfig.
// The endpoint is host[:port] and always spoken to over TLS, verified
// against the system's CAs and custom_ca. Without access_key and
// secret_key, the credentials come from where rigger runs: AWS_* or
// MINIO_* environment variables, ~/.aws/credentials, or the instance's IAM
// role.
func NewS3(cfg *spec.S3BackupConfig) (*S3, error) {
	if cfg == nil || cfg.Endpoint == "" || cfg.BucketName == "" {
		return nil, errors.New("s3backupconfig: endpoint and bucket_name are needed")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("s3backupconfig.endpoint %q: give host[:port] only; TLS is always used", cfg.Endpoint)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if cfg.CustomCA != "" && !pool.AppendCertsFromPEM([]byte(cfg.CustomCA)) {
		return nil, errors.New("s3backupconfig.custom_ca: no PEM certificate in it")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	var creds *credentials.Credentials
	var secrets []string
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
		secrets = []string{cfg.AccessKey, cfg.SecretKey}
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.FileAWSCredentials{},
			&credentials.IAM{Client: &http.Client{Transport: tr}},
		})
	}
	cl, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds: creds, Secure: true, Region: cfg.Region, Transport: tr,
		// Retry does it, around whole uploads: a streamed body cannot be
		// sent again by the client.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3backupconfig: %s", redact(err.Error(), secrets))
	}
	return &S3{cl: cl, endpoint: cfg.Endpoint, bucket: cfg.BucketName, folder: strings.Trim(cfg.Folder, "/"),
		secrets: secrets, Retry: defaultRetry()}, nil
}

// Key is the object key of a file of the folder.
func (s *S3) Key(file string) string {
	if s.folder == "" {
		return file
	}
	return s.folder + "/" + file
}

// Where says where a name is kept: s3://bucket/folder/name.
func (s *S3) Where(name string) string { return "s3://" + s.bucket + "/" + s.Key(name) }

// S3Error is a failed S3 operation. Its text never holds the credentials.
type S3Error struct {
	Op, Bucket, Key string
	// Code is S3's error code (AccessDenied, SignatureDoesNotMatch, …),
	// empty when the server gave none (a network error).
	Code string
	// Temporary says whether trying again may help.
	Temporary bool
	msg       string
}

func (e *S3Error) Error() string {
	return fmt.Sprintf("s3 %s s3://%s/%s: %s", e.Op, e.Bucket, e.Key, e.msg)
}

// permanent are S3 error codes that trying again cannot fix.
var permanent = []string{"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "NoSuchBucket",
	"InvalidBucketName", "AllAccessDisabled", "InvalidArgument", "NoSuchKey"}

func (s *S3) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	msg := err.Error()
	switch resp.Code {
	case "SignatureDoesNotMatch", "InvalidAccessKeyId":
		msg += " (check access_key and secret_key)"
	case "NoSuchBucket":
		msg += " (create the bucket, or fix bucket_name)"
	}
	return &S3Error{Op: op, Bucket: s.bucket, Key: key, Code: resp.Code,
		Temporary: !slices.Contains(permanent, resp.Code) && !errors.Is(err, context.Canceled),
		msg:       redact(msg, s.secrets)}
}

// redact replaces every secret in s.
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "<redacted>")
		}
	}
	return s
}

// Opener opens a snapshot's content again for each attempt: its reader
// and its size.
type Opener func(ctx context.Context) (io.ReadCloser, int64, error)

// Upload puts the snapshot (streamed from open, whose sha256 must be
// sc.SHA256) and then its sidecar, each retried as s.Retry says. An
// upload whose content does not match the checksum is removed.
func (s *S3) Upload(ctx context.Context, sc *Sidecar, open Opener) error {
	key := s.Key(sc.Name)
	err := s.Retry.do(ctx, func() error {
		rc, size, err := open(ctx)
		if err != nil {
			return fmt.Errorf("read the snapshot for s3: %w", err)
		}
		defer rc.Close()
		if size != sc.Size {
			return fmt.Errorf("snapshot %s is %d bytes, its sidecar says %d", sc.Name, size, sc.Size)
		}
		h := sha256.New()
		_, err = s.cl.PutObject(ctx, s.bucket, key, io.TeeReader(rc, h), size,
			minio.PutObjectOptions{ContentType: "application/octet-stream", UserMetadata: map[string]string{"sha256": sc.SHA256}})
		if err != nil {
			return s.wrap("upload", key, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sc.SHA256 {
			_ = s.cl.RemoveObject(context.WithoutCancel(ctx), s.bucket, key, minio.RemoveObjectOptions{})
			return &S3Error{Op: "upload", Bucket: s.bucket, Key: key, Temporary: true,
				msg: fmt.Sprintf("the content sent has sha256 %s, the snapshot %s: removed", got, sc.SHA256)}
		}
		return nil
	})
	if err != nil {
		return err
	}
	b, err := sc.Marshal()
	if err != nil {
		return err
	}
	sideKey := s.Key(sc.Name + SidecarSuffix)
	return s.Retry.do(ctx, func() error {
		_, err := s.cl.PutObject(ctx, s.bucket, sideKey, strings.NewReader(string(b)), int64(len(b)),
			minio.PutObjectOptions{ContentType: "application/json"})
		return s.wrap("upload", sideKey, err)
	})
}

// Object is a snapshot in the folder.
type Object struct {
	Name string
	Size int64
	// Sidecar is the snapshot's sidecar, nil when it has none or it
	// could not be read (SidecarErr).
	Sidecar    *Sidecar
	SidecarErr error
}

// List returns the snapshots in the folder, sorted by name.
func (s *S3) List(ctx context.Context) ([]Object, error) {
	prefix := ""
	if s.folder != "" {
		prefix = s.folder + "/"
	}
	files := map[string]int64{}
	for oi := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if oi.Err != nil {
			return nil, s.wrap("list", prefix, oi.Err)
		}
		if name := strings.TrimPrefix(oi.Key, prefix); path.Base(name) == name {
			files[name] = oi.Size
		}
	}
	var out []Object
	for name, size := range files {
		if strings.HasSuffix(name, SidecarSuffix) || CheckName(name) != nil {
			continue
		}
		o := Object{Name: name, Size: size}
		if _, ok := files[name+SidecarSuffix]; ok {
			o.Sidecar, o.SidecarErr = s.readSidecar(ctx, name)
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *S3) readSidecar(ctx context.Context, name string) (*Sidecar, error) {
	key := s.Key(name + SidecarSuffix)
	obj, err := s.cl.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(io.LimitReader(obj, MaxSidecarSize+1))
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	return ParseSidecar(b)
}

// Delete removes a snapshot and its sidecar; found says whether the
// snapshot was there.
func (s *S3) Delete(ctx context.Context, name string) (found bool, err error) {
	key := s.Key(name)
	if _, err := s.cl.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
		found = true
	} else if minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return false, s.wrap("stat", key, err)
	}
	for _, k := range []string{key, s.Key(name + SidecarSuffix)} {
		if err := s.Retry.do(ctx, func() error {
			return s.wrap("delete", k, s.cl.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}))
		}); err != nil {
			return found, err
		}
	}
	return found, nil
}

// Open streams the snapshot name from the folder, with its size; closing
// the reader ends the download. The caller verifies the content against
// the sidecar's sha256. A missing object is an *S3Error with Code
// NoSuchKey.
func (s *S3) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	key := s.Key(name)
	var st minio.ObjectInfo
	err := s.Retry.do(ctx, func() error {
		var err error
		st, err = s.cl.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		return s.wrap("stat", key, err)
	})
	if err != nil {
		return nil, 0, err
	}
	obj, err := s.cl.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s.wrap("download", key, err)
	}
	return obj, st.Size, nil
}

// Sidecar reads the sidecar of the snapshot name from the folder; a
// missing one is an *S3Error with Code NoSuchKey.
func (s *S3) Sidecar(ctx context.Context, name string) (*Sidecar, error) {
	return s.readSidecar(ctx, name)
}
