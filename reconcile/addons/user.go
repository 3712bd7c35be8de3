package addons

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// The user's add-ons, as RKE names them in the cluster
// (rke-user-addon, rke-user-includes-addons).
const (
	// UserAddonName is the add-on of cluster.yml's addons (inline YAML).
	UserAddonName = "user-addons"
	// UserIncludeAddonName is the add-on of cluster.yml's addons_include
	// (files and URLs), all entries together, in their order.
	UserIncludeAddonName = "user-addons-include"
)

// DefaultFetchTimeout bounds the download of one addons_include URL.
const DefaultFetchTimeout = 30 * time.Second

// UserInput is what cluster.yml says about the user's add-ons.
type UserInput struct {
	// Addons is cluster.yml's addons: inline multi-document YAML.
	Addons string
	// Include is cluster.yml's addons_include: paths (relative ones to
	// BaseDir) or http(s) URLs.
	Include []string
	// BaseDir is the directory of cluster.yml.
	BaseDir string
	// ReadFile, when set, reads the Include entries that are not URLs
	// instead of the files under BaseDir (rigger serve reads them from the
	// repository, at the revision it applies). It is given the entry as
	// written; it must refuse more than max bytes.
	ReadFile func(entry string, max int64) ([]byte, error)
}

// Fetcher reads the addons_include entries.
type Fetcher struct {
	// Client downloads URLs; nil: http.DefaultClient. Each download is
	// bounded by Timeout either way.
	Client *http.Client
	// Timeout bounds one download. Default DefaultFetchTimeout.
	Timeout time.Duration
	// Limits bound each source (and MaxObjects each add-on).
	Limits Limits
}

// UserAddons decodes the user's add-ons: UserAddonName from Addons, when
// set, and UserIncludeAddonName from the Include entries, when there are
// any. Either is absent when its key is empty, so that the caller can
// remove an add-on the user took out.
//
// As in RKE, an Include entry that starts with http:// or https:// is
// downloaded; any other entry is a file. Unlike RKE, which skips an entry
// that is neither an existing file nor a URL with a warning, a missing file
// is an error: a misspelled path does not silently drop add-ons. A download
// that fails, answers other than 200 or is larger than Limits.MaxBytes is
// an error naming the URL. Errors name the entry, the document and its line
// (a *DecodeError for YAML that cannot be read).
func (f Fetcher) UserAddons(ctx context.Context, in UserInput) ([]Addon, error) {
	lim := f.Limits.withDefaults()
	var out []Addon
	if in.Addons != "" {
		objs, err := Decode("addons", []byte(in.Addons), lim)
		if err != nil {
			return nil, err
		}
		out = append(out, Addon{Name: UserAddonName, Objects: objs})
	}
	if len(in.Include) > 0 {
		a := Addon{Name: UserIncludeAddonName}
		for i, entry := range in.Include {
			name := fmt.Sprintf("addons_include[%d] %s", i, entry)
			data, err := f.read(ctx, in, entry, lim.MaxBytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			objs, err := Decode(name, data, lim)
			if err != nil {
				return nil, err
			}
			if len(a.Objects)+len(objs) > lim.MaxObjects {
				return nil, fmt.Errorf("%s: addons_include has more than %d objects in all", name, lim.MaxObjects)
			}
			a.Objects = append(a.Objects, objs...)
		}
		out = append(out, a)
	}
	return out, nil
}

// isURL reports whether an addons_include entry is downloaded.
func isURL(entry string) bool {
	u, err := url.Parse(entry)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// read reads one addons_include entry, at most max bytes.
func (f Fetcher) read(ctx context.Context, in UserInput, entry string, max int64) ([]byte, error) {
	if isURL(entry) {
		return f.download(ctx, entry, max)
	}
	if in.ReadFile != nil {
		return in.ReadFile(entry, max)
	}
	path := entry
	if !filepath.IsAbs(path) {
		path = filepath.Join(in.BaseDir, path)
	}
	file, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no such file (%s): paths are relative to the directory of cluster.yml; URLs start with http:// or https://", path)
		}
		return nil, err
	}
	defer file.Close()
	return readLimited(file, max)
}

// download GETs url within the fetcher's timeout.
func (f Fetcher) download(ctx context.Context, rawURL string, max int64) ([]byte, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	client := f.Client
	if client == nil {
		client = includeClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("download: no complete answer within %s: %w", timeout, err)
		}
		return nil, fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download: the server answered %s", resp.Status)
	}
	b, err := readLimited(resp.Body, max)
	if err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	return b, nil
}

// includeClient downloads addons_include URLs when the Fetcher is given
// no client: as http.DefaultClient, but it connects to no loopback,
// link-local (a cloud's instance metadata, 169.254.169.254), multicast or
// unspecified address, nor to the instance metadata addresses outside
// them (metadataAddrs), also after a redirect: whoever can change
// cluster.yml in the repository rigger serve follows must not reach the
// services on serve's own host or pod, or the cloud's credentials, through
// it. Other addresses, private ranges included (a manifest server inside
// the network), are allowed. It connects directly, never through the
// environment's proxy (HTTPS_PROXY): a proxy would connect for it to
// whatever address it was asked, out of this check's sight.
var includeClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 10 * time.Second, Control: refuseLocal}).DialContext,
	TLSHandshakeTimeout: 10 * time.Second,
	MaxIdleConns:        10,
	IdleConnTimeout:     30 * time.Second,
}}

// refuseLocal is includeClient's dial check, on the address resolved.
func refuseLocal(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("addons_include: cannot read address %q", host)
	}
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() || slices.Contains(metadataAddrs, ip) {
		return fmt.Errorf("addons_include: %s is a loopback, link-local, multicast, unspecified or cloud instance metadata address, which rigger does not fetch add-ons from; "+
			"serve the file from another host, or put it in the repository beside cluster.yml", ip)
	}
	return nil
}

// metadataAddrs are the clouds' instance metadata services outside the
// link-local ranges: AWS's over IPv6 (fd00:ec2::254) and Alibaba Cloud's
// (100.100.100.200).
var metadataAddrs = []netip.Addr{netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}

// readLimited reads r to its end, refusing more than max bytes.
func readLimited(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than the limit of %d bytes", max)
	}
	return b, nil
}
