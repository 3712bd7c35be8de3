package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
)

// Rotation is the certificate rotation a plan carries out (cluster.yml's
// rotate_certificates, or rigger cert rotate), for people.
type Rotation struct {
	pki.Rotation
	// From says who asked: certrotate.FromClusterYML or FromCommandLine.
	From string `json:"from"`
	// Resumed is set when an earlier apply started the rotation and did not
	// finish it: its certificates are not issued again.
	Resumed bool `json:"resumed,omitempty"`
	// Stage is the stage of a CA rotation the plan moves the nodes to.
	Stage pki.CAStage `json:"stage,omitempty"`
	// Names are the certificates rotated; every component that reads one
	// restarts, node by node.
	Names []string `json:"certificates"`
}

// rotationState is what Plan decided about rotations, for Apply.
type rotationState struct {
	rec      certrotate.Record
	decision certrotate.Decision
	// active is the rotation the plan carries out: issued by it, or
	// resumed; nil when none.
	active *certrotate.Active
	// old and rotated are the two generations of the PKI of a CA rotation.
	old, rotated *pki.Set
	// saveGenerations is set when old or rotated changed (Ensure) and
	// must be saved before the plan is applied.
	saveGenerations bool
	// fresh is set when the rotation asked for meets a new PKI: there is
	// nothing to rotate, the request is only recorded.
	fresh bool
}

// next is the stage of a CA rotation that follows the plan's, once it is
// done; "" when none (no CA rotation, or its last stage).
func (r *rotationState) next() pki.CAStage {
	if r == nil || r.active == nil || !r.active.Rotation.CA {
		return ""
	}
	if i := slices.Index(pki.CAStages, r.active.Stage); i >= 0 && i+1 < len(pki.CAStages) {
		return pki.CAStages[i+1]
	}
	return ""
}

// rotationNow decides, from the state directory's record and what
// cluster.yml and the command line ask for, what the plan does about
// certificate rotation (certrotate.Decide).
func (s *Session) rotationNow() (*rotationState, error) {
	rec, err := certrotate.Load(s.opts.StateDir)
	if err != nil {
		return nil, stalls(ReasonStateDamaged, err)
	}
	return &rotationState{rec: rec, decision: certrotate.Decide(rec, certrotate.FromSpec(s.c.RotateCertificates), s.opts.Rotate)}, nil
}

// resumeCARotation is the PKI of a plan while a CA rotation is under way:
// both generations read from the state directory (certrotate.OldDir,
// NewDir), completed for cluster.yml (pki.Ensure), and the set of the
// rotation's stage (pki.Staged). The state directory's own PKI is the old
// generation until the rotation is done.
func (s *Session) resumeCARotation(r *resolvedPKI, o *observe.Cluster) error {
	a := r.rot.decision.Resume
	gen := func(sub string) (*pki.Set, []pki.Change, error) {
		set, err := pki.Load(filepath.Join(s.opts.StateDir, sub))
		if err == nil {
			var changes []pki.Change
			set, changes, err = pki.Ensure(set, s.req, s.opts.Now())
			return set, changes, err
		}
		return nil, nil, stalls(ReasonStateDamaged, fmt.Errorf("resume the CA rotation begun %s: %w; "+
			"restore %s from a backup: the nodes may run either generation of the CA", a.IssuedAt.Format(time.RFC3339), err, sub))
	}
	old, oc, err := gen(certrotate.OldDir)
	if err != nil {
		return err
	}
	rotated, rc, err := gen(certrotate.NewDir)
	if err != nil {
		return err
	}
	var accepted [][]byte
	for _, st := range pki.CAStages {
		staged, err := pki.Staged(old, rotated, st)
		if err != nil {
			return err
		}
		accepted = append(accepted, staged.Trusted(pki.CACertName))
	}
	accepted = append(accepted, old.Certs[pki.CACertName].CertPEM)
	if err := s.checkSameCA(o, accepted...); err != nil {
		return stalls(ReasonStateDamaged, err)
	}
	if r.set, err = pki.Staged(old, rotated, a.Stage); err != nil {
		return stalls(ReasonStateDamaged, err)
	}
	r.rot.old, r.rot.rotated, r.rot.active = old, rotated, a
	r.rot.saveGenerations = len(oc)+len(rc) > 0
	r.changes = rc
	r.source = PKISource{Kind: PKIStateDir, From: s.opts.StateDir}
	return nil
}

// issueRotation completes r for the rotation the plan starts or goes on
// with, existing being the PKI it started from (nil for a new cluster).
func (s *Session) issueRotation(r *resolvedPKI, existing *pki.Set) error {
	d := r.rot.decision
	switch {
	case d.Resume != nil:
		r.rot.active = d.Resume
	case d.Issue == nil:
	case existing == nil:
		r.rot.fresh = true
	case d.Issue.CA:
		old, oc, err := pki.Ensure(existing, s.req, s.opts.Now())
		if err != nil {
			return err
		}
		r.rot.old, r.rot.rotated = old, r.set
		r.rot.active = &certrotate.Active{Rotation: *d.Issue, From: d.From, Names: r.set.Names(), Stage: pki.CAStages[0]}
		if r.set, err = pki.Staged(old, r.rot.rotated, pki.CAStages[0]); err != nil {
			return err
		}
		// The state directory keeps the old generation until every node
		// has the new one; the new one is saved beside it.
		r.state, r.save = old, r.source.Kind == PKIRecovered || len(oc) > 0
	default:
		r.rot.active = &certrotate.Active{Rotation: *d.Issue, From: d.From, Names: d.Issue.Names(r.set)}
	}
	return nil
}

// Rotation is the rotation the plan carries out; nil when none.
func (p *Planned) Rotation() *Rotation {
	if p.rot == nil || p.rot.active == nil {
		return nil
	}
	a := p.rot.active
	return &Rotation{Rotation: a.Rotation, From: a.From, Resumed: p.rot.decision.Resume != nil, Stage: a.Stage, Names: slices.Clone(a.Names)}
}

// RotationWaiting is a rotation asked for that waits until the one under
// way is done (the next apply after it starts it); nil when none.
func (p *Planned) RotationWaiting() *pki.Rotation {
	if p.rot == nil {
		return nil
	}
	return p.rot.decision.Ignored
}

// RotationRecordCleared reports whether applying the plan drops the
// record of cluster.yml's rotate_certificates, which cluster.yml no
// longer has: adding it again then rotates again.
func (p *Planned) RotationRecordCleared() bool {
	return p.rot != nil && p.rot.decision.ClearRequested
}

// reloadPaths are the files of a node that hold the rotated certificates
// names (their certificate, key and kubeconfig), sorted.
func reloadPaths(files map[string][]byte, names []string) []string {
	var out []string
	for _, n := range names {
		cp, kp := pki.NodePath(n)
		for _, p := range []string{cp, kp, pki.KubeconfigPath(n)} {
			if _, ok := files[p]; ok {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// startRotation records, before anything changes on the nodes, the
// rotation the plan starts (its new certificates saved first, so that a
// record never names certificates the state directory lacks), and drops
// the record of a request cluster.yml no longer makes. It returns the
// record as saved, which finishRotation moves on.
func (s *Session) startRotation(pl *Planned) (certrotate.Record, error) {
	rot := pl.rot
	if rot == nil {
		return certrotate.Record{}, nil
	}
	rec, changed := rot.rec, false
	if rot.decision.ClearRequested {
		rec.Requested, changed = nil, true
	}
	if rot.saveGenerations || rot.decision.Issue != nil && rot.old != nil {
		for sub, set := range map[string]*pki.Set{certrotate.OldDir: rot.old, certrotate.NewDir: rot.rotated} {
			if err := pki.Save(filepath.Join(s.opts.StateDir, sub), set); err != nil {
				return rec, fmt.Errorf("save the certificates of the CA rotation: %w", err)
			}
		}
	}
	switch {
	case rot.fresh:
		// A new PKI: nothing to rotate; a request of cluster.yml is
		// recorded as done.
		if rot.decision.From == certrotate.FromClusterYML {
			rec.Requested, changed = rot.decision.Issue, true
		}
	case rot.decision.Issue != nil:
		rec = rot.decision.Started(rec, rot.active.Names, s.opts.Now())
		changed = true
	}
	if changed {
		if err := certrotate.Save(s.opts.StateDir, rec); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// finishRotation records in rec (as startRotation saved it), once every
// node of cluster.yml runs the plan, that the rotation's stage is done: a
// leaf rotation is over; a CA rotation goes on to its next stage, which the
// next plan carries out, and when its last is done the state directory's
// PKI becomes the new generation. After the
// stage in which every component came to trust both CAs, the pods RKE
// restarts after a CA rotation are deleted (restartSystemPods), so that
// they too trust the new CA before any certificate of it is shown.
//
// say reports progress (the apply's Step hook; nil: none).
func (s *Session) finishRotation(ctx context.Context, pl *Planned, rec certrotate.Record, cs kubernetes.Interface, say func(node, msg string)) error {
	rot := pl.rot
	if rot == nil || rot.active == nil {
		return nil
	}
	rec, done := certrotate.Advanced(rec)
	if rot.active.Rotation.CA {
		if rot.active.Stage == pki.StageTrust {
			n, err := s.restartSystemPods(ctx, cs, pl.PKI.Trusted(pki.CACertName))
			if err != nil {
				return err
			}
			if say != nil {
				say("kubernetes", fmt.Sprintf("both CAs published in kube-root-ca.crt; deleted %d system pod(s) for their controllers to start again trusting both", n))
			}
		}
		if done {
			if err := pki.Save(s.opts.StateDir, rot.rotated); err != nil {
				return fmt.Errorf("save the new CA's certificates: %w", err)
			}
		}
	}
	if err := certrotate.Save(s.opts.StateDir, rec); err != nil {
		return err
	}
	if done && rot.active.Rotation.CA {
		if err := os.RemoveAll(filepath.Join(s.opts.StateDir, filepath.Dir(certrotate.OldDir))); err != nil {
			s.opts.Log.Warn("CA rotation done, its old certificates not removed from the state directory", "cluster", s.c.ClusterName, "error", err)
		}
	}
	return nil
}

// systemPodSelectors are the pods RKE deletes after a CA rotation
// (cluster.RestartClusterPods of RKE v1.8.14): the network plugin's, the
// ingress controller's, metrics-server's, the DNS add-on's and their
// autoscalers', kube-api-auth's and Rancher's agent's. Their controllers
// start them again, reading the cluster's CA afresh.
var systemPodSelectors = []string{
	"k8s-app=flannel", "k8s-app=canal", "name=weave-net", "app=ingress-nginx", "k8s-app=metrics-server",
	"k8s-app=kube-dns", "k8s-app=kube-dns-autoscaler", "k8s-app=coredns-autoscaler", "app=kube-api-auth",
	"app=cattle-cluster-agent", "k8s-app=calico-node", "k8s-app=calico-kube-controllers",
}

// rootCAPublishTimeout bounds the wait for the controller manager to
// publish the CAs it trusts in kube-system's kube-root-ca.crt.
const rootCAPublishTimeout = 3 * time.Minute

// restartSystemPods waits until the controller manager publishes trusted
// (the CAs every component now trusts) in the kube-root-ca.crt ConfigMap,
// from which pods read the CA of the API server, and then deletes the
// system pods RKE restarts after a CA rotation (systemPodSelectors).
// Pods of their own read the ConfigMap's new content within a minute or
// two (the kubelet refreshes the projected volume) but a process that
// read it when it started keeps what it read: those are the user's to
// restart (docs/certificates.md).
// It returns how many pods it deleted.
func (s *Session) restartSystemPods(ctx context.Context, cs kubernetes.Interface, trusted []byte) (int, error) {
	if cs == nil {
		return 0, errors.New("restart the system pods for the new CA: the API server could not be reached")
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, rootCAPublishTimeout, true, func(ctx context.Context) (bool, error) {
		cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "it holds other certificates"
		return bytes.Equal([]byte(cm.Data["ca.crt"]), trusted), nil
	})
	if err != nil {
		return 0, fmt.Errorf("wait for the controller manager to publish both CAs in kube-system/kube-root-ca.crt: %w (%s)", err, last)
	}
	var errs []error
	deleted := 0
	for _, sel := range systemPodSelectors {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			errs = append(errs, fmt.Errorf("list pods %s: %w", sel, err))
			continue
		}
		for _, p := range pods.Items {
			switch err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); {
			case err == nil:
				deleted++
			case !apierrors.IsNotFound(err):
				errs = append(errs, fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err))
			}
		}
	}
	return deleted, errors.Join(errs...)
}
