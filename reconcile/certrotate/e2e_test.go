package certrotate_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/pki"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// TestCertRotateSandbox: a cluster of three nodes with every role,
// converged once, then
//
//   - rotate_certificates: {} in cluster.yml: every certificate on every
//     node gets a new serial, the CAs keep theirs, the API (any of the
//     three API servers, as a load balancer sees them) answers throughout,
//     the Nodes are Ready, and a plan again changes nothing (one-shot);
//   - the block removed: the record of it goes;
//   - a CA rotation as rigger cert rotate --rotate-ca asks it: a new CA on
//     every node, the new admin kubeconfig works and the old one no longer
//     does, a service-account token issued before still authenticates
//     (the signing key is kept, as RKE keeps it), the Nodes are Ready.
//
// Its workers change all at once (upgrade_strategy.max_unavailable_worker
// 100%), the one sandbox cluster to do so: the API servers still change
// one at a time, and each rotation's worker phase takes one node's time.
func TestCertRotateSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 25, Nodes: 3, Images: true})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	a := rt.New(t)
	c := rt.Cluster(t, s, rt.Roles(3), rt.NetworkOnly, func(c *spec.Cluster) { c.UpgradeStrategy.MaxUnavailableWorker = "100%" })
	if !t.Run("converge", func(t *testing.T) { a.Apply(ctx, t, c) }) {
		return
	}
	rt.NodesReady(ctx, t, a.Client(ctx, t, c), s.Nodes)
	oldKubeconfig := kubeconfig(ctx, t, a, c)
	exp := int64(3600)
	tok, err := a.Client(ctx, t, c).CoreV1().ServiceAccounts("default").CreateToken(ctx, "default",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a service-account token: %v", err)
	}
	isCA := func(file string) bool {
		return strings.HasSuffix(file, "/"+pki.CACertName+".pem") || strings.HasSuffix(file, "/"+pki.RequestHeaderCACertName+".pem")
	}

	rotated := *c
	rotated.RotateCertificates = &spec.RotateCertificates{}
	t.Run("every service", func(t *testing.T) {
		before := serials(t, s)
		pl := a.Plan(ctx, t, &rotated)
		if r := pl.Rotation(); r == nil || r.CA || r.Resumed || len(r.Names) == 0 {
			t.Fatalf("plan's rotation: %+v, want every certificate, started now", r)
		}
		poll := pollAPI(ctx, t, s, oldKubeconfig)
		a.Apply(ctx, t, &rotated)
		tries, down := poll()
		t.Logf("API polled %d times during the rotation, %d without any API server answering", tries, down)
		if down > 0 || tries < 10 {
			t.Errorf("the API did not answer %d times of %d during a rotation that keeps the CA", down, tries)
		}
		after := serials(t, s)
		for file, serial := range before {
			switch {
			case isCA(file) && after[file] != serial:
				t.Errorf("%s: the CA changed", file)
			case !isCA(file) && after[file] == serial:
				t.Errorf("%s: not reissued", file)
			}
		}
		rt.NodesReady(ctx, t, a.Client(ctx, t, &rotated), s.Nodes)
		// One-shot: the same request rotates no more.
		a.InSync(ctx, t, &rotated)
		if again := serials(t, s); !mapsEqual(again, after) {
			t.Error("certificates changed again")
		}
		rec, err := certrotate.Load(a.StateDir)
		if err != nil || rec.Active != nil || !certrotate.Same(rec.Requested, &pki.Rotation{}) {
			t.Errorf("record after the rotation: %+v, %v; want cluster.yml's request, none under way", rec, err)
		}
	})

	t.Run("request removed from cluster.yml", func(t *testing.T) {
		pl := a.Plan(ctx, t, c)
		if !pl.RotationRecordCleared() || pl.Rotation() != nil {
			t.Fatalf("plan without rotate_certificates: record cleared %v, rotation %+v", pl.RotationRecordCleared(), pl.Rotation())
		}
		a.Apply(ctx, t, c)
		if rec, err := certrotate.Load(a.StateDir); err != nil || rec.Requested != nil {
			t.Errorf("record: %+v, %v; want none", rec, err)
		}
		a.InSync(ctx, t, c)
	})

	t.Run("CA", func(t *testing.T) {
		before := serials(t, s)
		start := time.Now()
		a.Open = func(c *spec.Cluster, o reconcile.Options) (*reconcile.Session, error) {
			o.Rotate = &pki.Rotation{CA: true} // rigger cert rotate --rotate-ca
			return reconcile.Open(c, o)
		}
		poll := pollAPI(ctx, t, s, oldKubeconfig)
		a.Apply(ctx, t, c)
		a.Open = nil
		tries, down := poll()
		t.Logf("API polled %d times during the CA rotation, %d without any API server answering (with the old admin kubeconfig)", tries, down)
		after := serials(t, s)
		for file, serial := range before {
			if after[file] == serial {
				t.Errorf("%s: not reissued", file)
			}
		}
		cs := a.Client(ctx, t, c)
		rt.NodesReady(ctx, t, cs, s.Nodes)
		if err := listNodes(ctx, oldKubeconfig); err == nil {
			t.Error("the admin kubeconfig with the old CA still works")
		} else {
			t.Logf("the old admin kubeconfig: %v", err)
		}
		newKubeconfig := kubeconfig(ctx, t, a, c)
		cfg, err := clientcmd.RESTConfigFromKubeConfig(newKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		withToken := &rest.Config{Host: cfg.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
		tc, err := kubernetes.NewForConfig(withToken)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := tc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("the service-account token issued before the CA rotation: %v", err)
		} else if got := rev.Status.UserInfo.Username; got != "system:serviceaccount:default:default" {
			t.Errorf("the token authenticates as %q", got)
		}
		if rec, err := certrotate.Load(a.StateDir); err != nil || rec.Active != nil {
			t.Errorf("record after the CA rotation: %+v, %v; want none under way", rec, err)
		}
		if _, err := os.Stat(filepath.Join(a.StateDir, filepath.Dir(certrotate.OldDir))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the old generation is still in the state directory: %v", err)
		}
		// The pods read the new CA: the controller manager publishes it
		// alone, and the network plugin's pods were started again (as RKE
		// restarts them) while both CAs were trusted.
		newCA, err := os.ReadFile(filepath.Join(a.StateDir, pki.CACertName+".pem"))
		if err != nil {
			t.Fatal(err)
		}
		rt.Eventually(ctx, t, 2*time.Minute, "kube-root-ca.crt holds the new CA alone", func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err == nil && cm.Data["ca.crt"] == string(newCA), err
		})
		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=flannel"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("flannel pods: %d, %v", len(pods.Items), err)
		}
		for _, p := range pods.Items {
			if p.CreationTimestamp.Time.Before(start.Add(-time.Second)) {
				t.Errorf("pod %s was not started again during the CA rotation (created %s)", p.Name, p.CreationTimestamp)
			}
		}
		a.InSync(ctx, t, c)
	})
}

// serials are the serial numbers of the certificates on the nodes, by
// node and file ("10.231.25.11/kube-apiserver.pem"); a file of several
// certificates (a CA and what it trusts besides) by its first.
func serials(t *testing.T, s *sandbox.Sandbox) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range s.Nodes {
		files, err := filepath.Glob(filepath.Join(n.Dir, "etc-kubernetes", "ssl", "*.pem"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "-key.pem") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			blk, _ := pem.Decode(b)
			if blk == nil || blk.Type != "CERTIFICATE" {
				continue // the service-account token's public key
			}
			crt, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[n.Address+"/"+filepath.Base(f)] = crt.SerialNumber.String()
		}
	}
	if len(out) < 3*8 {
		t.Fatalf("only %d certificates on the nodes", len(out))
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func kubeconfig(ctx context.Context, t *testing.T, a *rt.Applier, c *spec.Cluster) []byte {
	t.Helper()
	set, err := a.Session(t, c).PKI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := pki.AdminKubeconfig(set, pki.RequestFor(c))
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func listNodes(ctx context.Context, kubeconfig []byte) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	return err
}

// pollAPI asks every API server of the sandbox for /readyz twice a second
// with the kubeconfig's credentials, until the returned func is called:
// it says how many times it asked and how many times none answered. An API
// server that is down refuses or answers 500 at once; one that is slow to
// answer on a loaded machine is up (under make test, two running API
// servers once took over 2 s while the third restarted), so each is given
// 10 s.
func pollAPI(ctx context.Context, t *testing.T, s *sandbox.Sandbox, kubeconfig []byte) func() (tries, down int) {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg          sync.WaitGroup
		tries, down int
	)
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			var errs []string
			for _, n := range s.Nodes {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:6443/readyz", n.Address), nil)
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						errs = nil
						break
					}
					err = errors.New(resp.Status)
				}
				errs = append(errs, n.Address+": "+err.Error())
			}
			if ctx.Err() != nil {
				return
			}
			tries++
			if len(errs) > 0 {
				if down++; down <= 3 {
					t.Logf("no API server answered: %s", strings.Join(errs, "; "))
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	stop := func() (int, int) {
		cancel()
		wg.Wait()
		return tries, down
	}
	t.Cleanup(func() { stop() }) // also when the test fails before it stops it
	return stop
}
