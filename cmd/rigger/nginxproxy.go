package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rigger/rigger/nodeproxy"
)

// envCPHosts is the variable of RKE's nginx-proxy container: the
// controlplane nodes' addresses, comma-separated.
const envCPHosts = "CP_HOSTS"

// cpHostsPort is the port CP_HOSTS entries without one get, and where
// RKE's nginx-proxy listens.
const cpHostsPort = "6443"

func newNginxProxyCommand() *cobra.Command {
	var listen string
	var upstreams []string
	cmd := &cobra.Command{
		Use:   "nginx-proxy",
		Short: "Forward the node's API server port to the controlplane nodes (the nginx-proxy container)",
		Long: `nginx-proxy is what the nginx-proxy container runs on nodes without the
controlplane role: a TCP load balancer on the node in front of every API server,
so that the kubelet and kube-proxy there reach the control plane at
https://127.0.0.1:6443 whichever controlplane node is up.

The container is RKE's: command nginx-proxy and the variable CP_HOSTS, the
controlplane nodes' addresses, comma-separated. rancher/rke-tools answers it by
running nginx; rigger's image (entrypoint rigger) runs this command, so the same
container works with either image.

Each connection goes to the next upstream in turn; an upstream that does not
accept within 2 seconds is skipped for a few seconds and the next one is tried.
On SIGTERM it stops accepting and lets open connections finish for 8 seconds.`,
		Example: `  # as in the container: every controlplane node on port 6443
  CP_HOSTS=10.0.0.1,10.0.0.2,10.0.0.3 rigger nginx-proxy

  rigger nginx-proxy --listen 127.0.0.1:6443 --upstream 10.0.0.1:6443 --upstream 10.0.0.2:6443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ups, err := proxyUpstreams(upstreams, os.Getenv(envCPHosts))
			if err != nil {
				return err
			}
			if err := checkHostPort(listen, true); err != nil {
				return fmt.Errorf("--listen %q: %w; set it to address:port, such as 0.0.0.0:6443", listen, err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			p, err := nodeproxy.New(nodeproxy.Config{Upstreams: ups, Logger: log})
			if err != nil {
				return fmt.Errorf("start nginx-proxy: %w", err)
			}
			ctx := cmd.Context()
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w; free the port or set --listen to another address:port", listen, err)
			}
			log.Info("nginx-proxy listening", "component", "nginx-proxy", "listen", ln.Addr().String(), "upstreams", strings.Join(ups, ","))
			return p.Serve(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "0.0.0.0:"+cpHostsPort, "address:port to accept connections on")
	cmd.Flags().StringArrayVar(&upstreams, "upstream", nil, "an API server as host:port, repeatable (default: the hosts in $CP_HOSTS on port 6443)")
	return cmd
}

// proxyUpstreams returns the --upstream values, checked, or when there are
// none the hosts of CP_HOSTS (host or host:port, comma-separated; a host
// gets port 6443, as RKE's nginx configuration gives it).
func proxyUpstreams(flags []string, cpHosts string) ([]string, error) {
	if len(flags) > 0 {
		for _, u := range flags {
			if err := checkHostPort(u, false); err != nil {
				return nil, fmt.Errorf("--upstream %q: %w; give an API server as host:port, such as 10.0.0.1:6443", u, err)
			}
		}
		return flags, nil
	}
	var ups []string
	for _, h := range strings.Split(cpHosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		u := h
		if _, _, err := net.SplitHostPort(h); err != nil {
			// A bare host: an IPv6 address may come with or without brackets.
			u = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), cpHostsPort)
		}
		if err := checkHostPort(u, false); err != nil {
			return nil, fmt.Errorf("%s entry %q: %w; give the controlplane nodes as host or host:port, comma-separated", envCPHosts, h, err)
		}
		ups = append(ups, u)
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("no upstream API servers: give --upstream host:port (repeatable) or set %s to the controlplane nodes' addresses, comma-separated (such as %s=10.0.0.1,10.0.0.2)", envCPHosts, envCPHosts)
	}
	return ups, nil
}

// checkHostPort checks that s is host:port with a host and a port number,
// or for a listen address (listen) possibly no host (":6443", every
// address) and port 0 (a free port).
func checkHostPort(s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if host == "" && !listen {
		return errors.New("no host")
	}
	lowest := 1
	if listen {
		lowest = 0
	}
	if n, err := strconv.Atoi(port); err != nil || n < lowest || n > 65535 {
		return fmt.Errorf("port %q is not a number from %d to 65535", port, lowest)
	}
	return nil
}
