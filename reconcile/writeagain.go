package reconcile

import (
	"context"
	"fmt"
	"strings"

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
	f := pl.Observed.StoredAPIs
	var apis []storedapi.API
	for _, a := range storedapi.Removed(f.From, f.To) {
		if a.GroupResource() == w.Resource {
			apis = append(apis, a)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, storedAPIsTimeout)
	defer cancel()
	cli, err := s.services().EtcdClient(ctx, pl.PKI, pl.Observed)
	if err != nil {
		return n, fmt.Errorf("read etcd again after writing %d objects of %s: %w", n, w.Resource, err)
	}
	defer cli.Close()
	left, err := storedapi.Scan(ctx, cli.KV(), s.etcdPrefix(), f.From, f.To, apis)
	if err != nil {
		return n, fmt.Errorf("read etcd again after writing %d objects of %s: %w", n, w.Resource, err)
	}
	if len(left.Objects) > 0 {
		var keys []string
		for _, o := range left.Objects {
			keys = append(keys, o.Key+" at "+o.API.GroupVersion())
		}
		return n, fmt.Errorf("%d objects of %s written again through %s, and etcd still stores %d at an API version 1.%d no longer serves: %s",
			n, w.Resource, w.At, len(left.Objects)+left.More, f.To, strings.Join(keys, ", "))
	}
	return n, nil
}
