package reconcile

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/storedapi"
)

// etcdPrefix is the prefix of the API servers' keys in etcd.
func (s *Session) etcdPrefix() string {
	if p := s.c.Services.KubeAPI.ExtraArgs["etcd-prefix"]; p != "" {
		return p
	}
	return desired.EtcdPathPrefix
}

// writeAgain writes every object of w's resource again through the API
// servers (storedapi.WriteAgain), then reads etcd again to check that
// none of them is stored at an API version the upgrade takes away.
func (s *Session) writeAgain(ctx context.Context, pl *decide.Planned, w plan.WriteAgain) (int, error) {
	cfg, err := s.services().RESTConfig(pl.PKI, pl.Observed)
	if err != nil {
		return 0, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	n, err := storedapi.WriteAgain(ctx, dyn, w.Resource, w.At)
	if err != nil {
		return n, err
	}
	ctx, cancel := context.WithTimeout(ctx, storedAPIsTimeout)
	defer cancel()
	cli, err := s.services().EtcdClient(ctx, pl.PKI, pl.Observed)
	if err != nil {
		return n, fmt.Errorf("read etcd again after writing %d objects of %s: %w", n, w.Resource, err)
	}
	defer cli.Close()
	f := pl.Observed.StoredAPIs
	return n, storedapi.CheckWritten(ctx, cli.KV(), s.etcdPrefix(), f.From, f.To, w.Resource)
}
