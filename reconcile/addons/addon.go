package addons

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Addon is a named, ordered set of Kubernetes objects that rigger applies,
// tracks (its inventory) and prunes as one: the network plugin, CoreDNS,
// metrics-server, the ingress controller, the user's add-ons.
type Addon struct {
	// Name identifies the add-on: its inventory is the ConfigMap
	// rigger-addon-<Name> in kube-system, and its objects carry the label
	// rigger.io/addon=<Name>. Lower-case letters, digits and '-', starting
	// with a letter, at most MaxNameLength characters.
	Name string
	// Objects in the order given. Apply applies them by kind (see the
	// package documentation); objects of one kind keep this order.
	Objects []Object
	// Recreate are objects of Objects that are deleted and created again
	// when applying them fails because a field that cannot change differs
	// (a Job's pod template): RKE deletes ingress-nginx's admission Jobs
	// before every deploy for this reason. Others are never deleted so.
	Recreate []ObjectRef
	// NodeReady, when set, is part of the add-on's readiness: once its
	// objects are ready, Apply waits until it holds for every Node whose
	// Ready condition is True, and until every Node whose kubelet reports
	// it NotReady (False) is Ready; Nodes whose kubelet does not report
	// (Unknown: the node is down) are not waited for. It returns "" when
	// it holds and what is missing otherwise. A network plugin whose pods
	// run before they set the node up (flannel has no readiness probe)
	// says so: pods created before then fail to get a network.
	NodeReady func(node *unstructured.Unstructured) (missing string)
	// Concurrent marks an add-on that needs none of the add-ons beside it
	// that are Concurrent too, nor is needed by them (the system add-ons
	// after the network plugin). Apply takes a run of such add-ons at
	// once: it applies their objects one add-on after the other, in order,
	// then waits for all of them together, and prunes and records each.
	// Any other add-on is applied once every add-on before it is ready,
	// and the add-ons after it wait until it is.
	Concurrent bool
}

// Object is one Kubernetes object of an add-on and where it was read.
type Object struct {
	*unstructured.Unstructured
	// Source says where the object was read, for errors and the plan.
	Source Source
}

// Source says where an object was read: the file, URL or cluster.yml key,
// the YAML document and the line it starts at.
type Source struct {
	// Name of the file, URL or cluster.yml key ("addons").
	Name string `json:"name"`
	// Document is the 1-based index of the YAML document in Name among the
	// documents that have content; 0 when the object did not come from YAML.
	Document int `json:"document,omitempty"`
	// Line is the line of Name the document starts at; 0 when unknown.
	Line int `json:"line,omitempty"`
	// Item is the 1-based index of the object in the items of a List
	// document; 0 when the document is the object itself.
	Item int `json:"item,omitempty"`
}

// String reads "manifests/a.yaml: document 2 at line 14, item 3".
func (s Source) String() string {
	if s.Name == "" && s.Document == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(s.Name)
	if s.Document > 0 {
		fmt.Fprintf(&b, ": document %d", s.Document)
		if s.Line > 0 {
			fmt.Fprintf(&b, " at line %d", s.Line)
		}
		if s.Item > 0 {
			fmt.Fprintf(&b, ", item %d", s.Item)
		}
	}
	return b.String()
}

// ObjectRef names one object in the cluster, as the inventory records it.
type ObjectRef struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String reads "Deployment kube-system/coredns" or, for a cluster-scoped
// object, "ClusterRole flannel".
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// GroupKind is the object's API group and kind.
func (r ObjectRef) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: r.Group, Kind: r.Kind}
}

// key identifies the object whatever API version it is read in.
func (r ObjectRef) key() objKey {
	return objKey{Group: r.Group, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

// objKey is an ObjectRef without its version: the identity of an object.
type objKey struct{ Group, Kind, Namespace, Name string }

// refOf is the ObjectRef of u as it stands (its namespace unchanged).
func refOf(u *unstructured.Unstructured) ObjectRef {
	gvk := u.GroupVersionKind()
	return ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// MaxNameLength is the longest add-on name: the inventory's name
// (rigger-addon-<name>) and the label value must stay within 63 characters.
const MaxNameLength = 50

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// validName reports why name cannot name an add-on, or nil.
func validName(name string) error {
	if len(name) > MaxNameLength || !nameRE.MatchString(name) {
		return fmt.Errorf("add-on name %q: use lower-case letters, digits and '-', start with a letter, at most %d characters", name, MaxNameLength)
	}
	return nil
}
