package certrotate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/reconcile/statedir"
)

// Plan is what a plan does about certificate rotation: the Decision, the
// rotation it carries out (Active), and for a CA rotation its two
// generations of certificates. It is decided with the plan's PKI (package
// pkisource) and not changed afterwards. It is the plan's staged operation
// of the certificates (staged.Operation).
type Plan struct {
	// Record is the state directory's record when the plan was made.
	Record   Record
	Decision Decision
	// Active is the rotation the plan carries out: issued by it, or
	// resumed; nil when none.
	Active *Active
	// Old and Rotated are the two generations of the PKI of a CA rotation.
	Old, Rotated *pki.Set
	// SaveGenerations is set when Old or Rotated changed (pki.Ensure) and
	// must be saved before the plan is applied.
	SaveGenerations bool
	// Fresh is set when the rotation asked for meets a new PKI: there is
	// nothing to rotate, the request is only recorded.
	Fresh bool
	// Set is the plan's PKI, at the stage of a CA rotation: what its
	// components trust and the certificates a CA rotation restarts.
	Set *pki.Set
}

var _ staged.Operation = (*Plan)(nil)

// StageTitle says what a stage of a CA rotation does, for people.
func StageTitle(st pki.CAStage) string {
	switch st {
	case pki.StageTrust:
		return "every component trusts both CAs"
	case pki.StageIssue:
		return "every certificate is the new CA's, both CAs trusted"
	case pki.StageFinish:
		return "the new CA alone is trusted"
	}
	return string(st)
}

// Title is the phase of the CA rotation's stage the plan carries out; ""
// for a rotation of leaf certificates, which has one stage.
func (p *Plan) Title() (plan.Phase, string) {
	if p == nil || p.Active == nil || p.Active.Stage == "" {
		return "", ""
	}
	st := p.Active.Stage
	return "rotation", fmt.Sprintf("CA rotation, stage %s: %s", st, StageTitle(st))
}

// Restarts are the files of node n that hold a certificate the plan
// rotates (Reload): their components restart.
func (p *Plan) Restarts(n *desired.Node) map[string]string {
	out := map[string]string{}
	for _, f := range p.Reload(n.Files, p.Set) {
		out[f] = plan.ReasonRotation
	}
	return out
}

// Blocked is nil: a rotation never refuses a plan (a new CA does, which is
// the plan's PKI's: pkisource.Resolved.NewCA).
func (p *Plan) Blocked() error { return nil }

// Work reports whether applying the plan rotates certificates or drops
// the record of a request cluster.yml no longer makes.
func (p *Plan) Work() bool { return p != nil && (p.Active != nil || p.Decision.ClearRequested) }

// Next is the stage of a CA rotation that follows the plan's, for people;
// "" when none.
func (p *Plan) Next() string {
	st := p.NextStage()
	if st == "" {
		return ""
	}
	return fmt.Sprintf("CA rotation, stage %s (%s)", st, StageTitle(st))
}

// Before saves what the plan issued and its record (Start); the After it
// returns ends the stage (Finish) once every node of cluster.yml runs the
// plan: with a node left out, the stage is not done and the next plan
// carries it out again.
func (p *Plan) Before(s staged.Start) (staged.After, error) {
	rec, err := p.Start(s.Dir, s.Now)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e staged.End) (bool, error) {
		if p == nil || len(e.Unreachable) > 0 {
			return false, nil
		}
		err := p.Finish(ctx, End{Dir: e.Dir, Record: rec, Trusted: p.Set.Trusted(pki.CACertName), API: e.API,
			Say: func(node, msg string) { e.Say(node, msg, nil) }, Log: e.Log})
		return err == nil && p.Active != nil, err
	}, nil
}

// NextStage is the stage of a CA rotation that follows the plan's, once it
// is done; "" when none (no CA rotation, or its last stage).
func (p *Plan) NextStage() pki.CAStage {
	if p == nil || p.Active == nil || !p.Active.Rotation.CA {
		return ""
	}
	if i := slices.Index(pki.CAStages, p.Active.Stage); i >= 0 && i+1 < len(pki.CAStages) {
		return pki.CAStages[i+1]
	}
	return ""
}

// Reload are the files of a node that hold the certificates the plan
// rotates (their certificate, key and kubeconfig), sorted: every component
// that reads one restarts. set is the plan's PKI: a CA rotation changes
// every certificate of it.
func (p *Plan) Reload(files map[string][]byte, set *pki.Set) []string {
	if p == nil || p.Active == nil {
		return nil
	}
	names := p.Active.Names
	if p.Active.Rotation.CA {
		names = set.Names()
	}
	var out []string
	for _, n := range names {
		cp, kp := pki.NodePath(n)
		for _, f := range []string{cp, kp, pki.KubeconfigPath(n)} {
			if _, ok := files[f]; ok {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Start records in the state directory dir, before anything changes on
// the nodes, the rotation the plan starts (its new certificates saved
// first, so that a record never names certificates the state directory
// lacks), and drops the record of a request cluster.yml no longer makes.
// It returns the record as saved, which Finish moves on.
func (p *Plan) Start(dir string, now time.Time) (Record, error) {
	if p == nil {
		return Record{}, nil
	}
	rec, changed := p.Recorded(now)
	if p.SavesGenerations() {
		for sub, set := range map[string]*pki.Set{OldDir: p.Old, NewDir: p.Rotated} {
			if err := pki.Save(filepath.Join(dir, sub), set); err != nil {
				return p.Record, fmt.Errorf("save the certificates of the CA rotation: %w", err)
			}
		}
	}
	if changed {
		if err := Save(dir, rec); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// Recorded is the record Start saves at now: the rotation the plan starts
// Active (Decision.Started), a request of cluster.yml that meets a new PKI
// recorded as done, one cluster.yml no longer makes dropped. changed
// reports whether it differs from the plan's Record.
func (p *Plan) Recorded(now time.Time) (rec Record, changed bool) {
	rec = p.Record
	if p.Decision.ClearRequested {
		rec.Requested, changed = nil, true
	}
	switch {
	case p.Fresh:
		// A new PKI: nothing to rotate; a request of cluster.yml is
		// recorded as done.
		if p.Decision.From == FromClusterYML {
			rec.Requested, changed = p.Decision.Issue, true
		}
	case p.Decision.Issue != nil:
		rec = p.Decision.Started(rec, p.Active.Names, now)
		changed = true
	}
	return rec, changed
}

// SavesGenerations reports whether Start saves the two generations of a
// CA rotation (Old and Rotated): one it starts, or whose sets changed.
func (p *Plan) SavesGenerations() bool {
	return p.SaveGenerations || p.Decision.Issue != nil && p.Old != nil
}

// End is what finishing a plan's stage needs besides the plan.
type End struct {
	// Dir is the state directory; Record the record as Start saved it.
	Dir    string
	Record Record
	// Trusted are the CAs the plan's components trust (pki.Set.Trusted of
	// the CA); API the API server's client (nil: not reachable).
	Trusted []byte
	API     kubernetes.Interface
	// Say reports progress (nil: none); Log gets what is worth a warning.
	Say func(node, msg string)
	Log *slog.Logger
}

// Finish records, once every node of cluster.yml runs the plan, that the
// rotation's stage is done: a leaf rotation is over; a CA rotation goes on
// to its next stage, which the next plan carries out, and when its last is
// done the state directory's PKI becomes the new generation. After the
// stage in which every component came to trust both CAs, the pods RKE
// restarts after a CA rotation are deleted (RestartSystemPods), so that
// they too trust the new CA before any certificate of it is shown.
func (p *Plan) Finish(ctx context.Context, e End) error {
	if p == nil || p.Active == nil {
		return nil
	}
	rec, done := Advanced(e.Record)
	if p.Active.Rotation.CA {
		if p.Active.Stage == pki.StageTrust {
			n, err := RestartSystemPods(ctx, e.API, e.Trusted)
			if err != nil {
				return err
			}
			if e.Say != nil {
				e.Say("kubernetes", fmt.Sprintf("both CAs published in kube-root-ca.crt; deleted %d system pod(s) for their controllers to start again trusting both", n))
			}
		}
		if done {
			if err := pki.Save(e.Dir, p.Rotated); err != nil {
				return fmt.Errorf("save the new CA's certificates: %w", err)
			}
		}
	}
	if err := Save(e.Dir, rec); err != nil {
		return err
	}
	if done && p.Active.Rotation.CA {
		if err := statedir.RemoveAll(e.Dir, filepath.Dir(OldDir)); err != nil && e.Log != nil {
			e.Log.Warn("CA rotation done, its old certificates not removed from the state directory", "error", err)
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

// RestartSystemPods waits until the controller manager publishes trusted
// (the CAs every component now trusts) in the kube-root-ca.crt ConfigMap,
// from which pods read the CA of the API server, and then deletes the
// system pods RKE restarts after a CA rotation (systemPodSelectors).
// Pods of their own read the ConfigMap's new content within a minute or
// two (the kubelet refreshes the projected volume) but a process that
// read it when it started keeps what it read: those are the user's to
// restart (docs/certificates.md).
// It returns how many pods it deleted.
func RestartSystemPods(ctx context.Context, cs kubernetes.Interface, trusted []byte) (int, error) {
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
