package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/spec"
)

// deployDir holds the manifests of rigger serve's in-cluster deployment.
const deployDir = "../../deploy"

// secretPlaceholder is the only value a Secret template in deploy/ may hold.
const secretPlaceholder = "REPLACE_ME"

// deployObject is one document of a file in deploy/.
type deployObject struct {
	file string
	obj  runtime.Object
}

// strictDecoder decodes Kubernetes manifests into client-go's typed objects
// and fails on unknown kinds, unknown or duplicate fields. (scheme.Codecs
// is lenient: it drops unknown fields, so a misspelled field would pass.)
func strictDecoder() runtime.Decoder {
	return serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
}

// loadDeploy decodes every document of every deploy/*.yaml but the
// kustomization.
func loadDeploy(t *testing.T) []deployObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	dec := strictDecoder()
	var objs []deployObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlDocuments(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(docs) == 0 {
			t.Errorf("%s: no object", f)
		}
		for i, doc := range docs {
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s: document %d: %v", f, i+1, err)
				continue
			}
			objs = append(objs, deployObject{file: filepath.Base(f), obj: obj})
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return objs
}

// yamlDocuments splits a YAML stream into its documents, leaving out those
// that hold only comments.
func yamlDocuments(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// only returns the single object of type T in objs.
func only[T runtime.Object](t *testing.T, objs []deployObject) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("deploy/ has %d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

func all[T runtime.Object](objs []deployObject) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

func TestDeployStrictDecoderRejectsMistakes(t *testing.T) {
	// The checks below are only worth something if a mistake fails.
	for name, doc := range map[string]string{
		"unknown field":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"unknown kind":   "apiVersion: v1\nkind: Secrett\nmetadata: {name: x}\n",
		"duplicate key":  "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\ntype: Opaque\ntype: Opaque\n",
		"no kind at all": "apiVersion: v1\nmetadata: {name: x}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := strictDecoder().Decode([]byte(doc), nil, nil); err == nil {
				t.Errorf("decoded without error:\n%s", doc)
			}
		})
	}
}

func TestDeployManifests(t *testing.T) {
	objs := loadDeploy(t)
	for _, o := range objs {
		if ns := objectNamespace(o.obj); ns != "" && ns != "rigger-system" {
			t.Errorf("%s: %T in namespace %q, want rigger-system", o.file, o.obj, ns)
		}
	}
	only[*corev1.Namespace](t, objs)
	only[*corev1.Service](t, objs)
	if pvcs := all[*corev1.PersistentVolumeClaim](objs); len(pvcs) > 0 {
		t.Errorf("deploy/ has %d PersistentVolumeClaim(s): the state is in Secrets, and a volume would pin the replicas", len(pvcs))
	}
}

// TestDeployKustomization builds deploy/ as `kubectl apply -k` does: every
// manifest but the Secret templates is in it, and no Secret is.
func TestDeployKustomization(t *testing.T) {
	objs := loadDeploy(t)
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.Namespace != "rigger-system" {
		t.Errorf("kustomization.yaml: namespace %q, want rigger-system", k.Namespace)
	}

	var want []string // kind/name of every object of the files listed
	for _, o := range objs {
		_, secret := o.obj.(*corev1.Secret)
		listed := slices.Contains(k.Resources, o.file)
		switch {
		case secret && listed:
			t.Errorf("kustomization.yaml lists %s: `kubectl apply -k` would overwrite the real Secret with placeholders", o.file)
		case !secret && !listed:
			t.Errorf("kustomization.yaml does not list %s (%T)", o.file, o.obj)
		case listed:
			want = append(want, kindName(o.obj))
		}
	}

	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), deployDir)
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	var got []string
	for _, r := range m.Resources() {
		got = append(got, r.GetKind()+"/"+r.GetName())
		if r.GetKind() != "Namespace" && r.GetNamespace() != "rigger-system" {
			t.Errorf("kustomize build: %s/%s in namespace %q", r.GetKind(), r.GetName(), r.GetNamespace())
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kustomize build deploy/ (-files listed, +built):\n%s", d)
	}
}

// TestDeployRBACOnlyLeasesAndSecrets: rigger's rights are its namespace's
// Leases (leader election) and Secrets (the clusters' state), with the
// verbs each needs and no more.
func TestDeployRBACOnlyLeasesAndSecrets(t *testing.T) {
	objs := loadDeploy(t)
	for _, o := range objs {
		switch o.obj.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			t.Errorf("%s: %T: rigger needs no cluster-wide rights", o.file, o.obj)
		}
	}
	role := only[*rbacv1.Role](t, objs)
	// What each resource is for, and the verbs that needs.
	needs := map[string]struct {
		group, why string
		verbs      []string
	}{
		"leases":  {"coordination.k8s.io", "the replicas sharing the clusters (gitops/replicas: a Lease per cluster and per replica)", []string{"get", "list", "create", "update", "delete"}},
		"secrets": {"", "the state of --state-backend kubernetes and the agent tunnel's records (secretstate)", []string{"get", "list", "create", "update", "delete"}},
	}
	granted := map[string]bool{}
	for i, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("Role %s rule %d: non-resource URLs %v, resource names %v", role.Name, i, r.NonResourceURLs, r.ResourceNames)
		}
		if len(r.Resources) != 1 || len(r.APIGroups) != 1 {
			t.Errorf("Role %s rule %d: groups %v, resources %v: one group and one resource a rule", role.Name, i, r.APIGroups, r.Resources)
			continue
		}
		need, ok := needs[r.Resources[0]]
		if !ok || r.APIGroups[0] != need.group {
			t.Errorf("Role %s rule %d: group %q resource %q: rigger needs only %v", role.Name, i, r.APIGroups[0], r.Resources[0], slices.Sorted(maps.Keys(needs)))
			continue
		}
		granted[r.Resources[0]] = true
		if d := cmp.Diff(need.verbs, r.Verbs); d != "" {
			t.Errorf("Role %s rule %d: %s verbs, which %s needs (-want +got):\n%s", role.Name, i, r.Resources[0], need.why, d)
		}
	}
	for res, need := range needs {
		if !granted[res] {
			t.Errorf("Role %s does not grant %s, which %s needs", role.Name, res, need.why)
		}
	}

	sa := only[*corev1.ServiceAccount](t, objs)
	rb := only[*rbacv1.RoleBinding](t, objs)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %s binds %s %s, want Role %s", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name, role.Name)
	}
	wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: "rigger-system"}}
	if d := cmp.Diff(wantSubj, rb.Subjects); d != "" {
		t.Errorf("RoleBinding %s subjects (-want +got):\n%s", rb.Name, d)
	}
	if got := only[*appsv1.Deployment](t, objs).Spec.Template.Spec.ServiceAccountName; got != sa.Name {
		t.Errorf("the Deployment runs as service account %q, want %q", got, sa.Name)
	}
}

func TestDeploySecretsArePlaceholders(t *testing.T) {
	objs := loadDeploy(t)
	secrets := all[*corev1.Secret](objs)
	if len(secrets) == 0 {
		t.Fatal("deploy/ has no Secret template")
	}
	for _, s := range secrets {
		if len(s.Data)+len(s.StringData) == 0 {
			t.Errorf("Secret %s has no key: the template should show which keys to fill in", s.Name)
		}
		for k, v := range s.StringData {
			if v != secretPlaceholder {
				t.Errorf("Secret %s: stringData.%s is not the placeholder %s", s.Name, k, secretPlaceholder)
			}
		}
		for k, v := range s.Data {
			if string(v) != secretPlaceholder {
				t.Errorf("Secret %s: data.%s is not the placeholder %s", s.Name, k, secretPlaceholder)
			}
		}
	}
	// Not in a Secret either: a comment or an env value, in the manifests
	// or in the files beside them (deploy/hyperkube's recipe).
	var files []string
	err := filepath.WalkDir(deployDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"PRIVATE KEY", "BEGIN OPENSSH", "ghp_", "glpat-"} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q: deploy/ must hold no credential", f, s)
			}
		}
	}
}

// TestDeployServe checks the Deployment against serve's real flags: its
// arguments parse, and every path and port they name is mounted or exposed.
func TestDeployServe(t *testing.T) {
	objs := loadDeploy(t)
	d := only[*appsv1.Deployment](t, objs)
	pod := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "rigger/rigger:dev" {
		t.Errorf("image %q, want rigger/rigger:dev", c.Image)
	}
	if len(c.Command) > 0 {
		t.Errorf("command %v replaces the image's entrypoint (rigger)", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %v, want serve and its flags", c.Args)
	}

	cmd := newServeCommand()
	if err := cmd.ParseFlags(c.Args[1:]); err != nil {
		t.Fatalf("serve %v: %v", c.Args[1:], err)
	}
	if rest := cmd.Flags().Args(); len(rest) > 0 {
		t.Errorf("serve takes no arguments, the Deployment gives %v", rest)
	}
	fl := cmd.Flags()
	str := func(name string) string {
		v, err := fl.GetString(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v, _ := fl.GetBool("leader-elect"); !v {
		t.Error("--leader-elect is not set: two replicas would both reconcile")
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy %q: every replica is ready with its share of the clusters, so a RollingUpdate works", d.Spec.Strategy.Type)
	}
	fields := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if fields["POD_IP"] != "status.podIP" {
		t.Error("no POD_IP from status.podIP: the other replicas cannot relay webhooks to this one (--advertise-url)")
	}
	for name, path := range map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_UID": "metadata.uid"} {
		if fields[name] != path {
			t.Errorf("no %s from %s: serve cannot tell the cluster it runs in, and would drain itself", name, path)
		}
	}
	if got := str("path"); got != "clusters/" {
		t.Errorf("--path %q, want clusters/", got)
	}
	if str("repo") == "" {
		t.Error("--repo is not set")
	}

	// The state in Secrets, the working copy on an emptyDir, the replicas
	// free to run on any node.
	if got := str("state-backend"); got != stateBackendKubernetes {
		t.Errorf("--state-backend %q, want %s: the state would be lost with the pod", got, stateBackendKubernetes)
	}
	if got := str("state-namespace"); got != "" && got != d.Namespace {
		t.Errorf("--state-namespace %q, want the pod's (%s), where the Role grants Secrets", got, d.Namespace)
	}
	if pod.Affinity != nil && pod.Affinity.PodAffinity != nil {
		t.Error("the pods are pinned together (podAffinity): with the state in Secrets nothing needs it")
	}
	// Mounts: the state's working copy and the clone on writable volumes,
	// git credentials from the git Secret.
	secrets := map[string]*corev1.Secret{}
	for _, s := range all[*corev1.Secret](objs) {
		secrets[s.Name] = s
	}
	if m, v := mountOf(pod, c, str("state-dir")); v == nil || v.EmptyDir == nil || m.ReadOnly {
		t.Errorf("--state-dir %s is not on a writable emptyDir", str("state-dir"))
	}
	if m, v := mountOf(pod, c, str("workdir")); v == nil || v.Secret != nil || m.ReadOnly {
		t.Errorf("--workdir %s is not on a writable volume", str("workdir"))
	}
	for _, flag := range []string{"git-ssh-key", "git-known-hosts"} {
		checkSecretFile(t, pod, c, secrets, "--"+flag, str(flag))
	}

	// The nodes' SSH key and known_hosts, where cluster.yml's defaults
	// point inside the pod.
	home := envValue(c, "HOME")
	if home == "" {
		t.Error("HOME is not set: cluster.yml's ~/.ssh paths cannot be found")
	} else {
		for _, p := range []string{spec.DefaultSSHKeyPath, spec.DefaultKnownHostsFile} {
			checkSecretFile(t, pod, c, secrets, "cluster.yml's "+p, path.Join(home, strings.TrimPrefix(p, "~/")))
		}
	}

	// The age identities of SOPS-encrypted cluster.yml files, where
	// SOPS_AGE_KEY_FILE points, from an optional Secret.
	if f := envValue(c, "SOPS_AGE_KEY_FILE"); f == "" {
		t.Error("SOPS_AGE_KEY_FILE is not set: serve cannot decrypt cluster.yml files encrypted with SOPS")
	} else {
		checkSecretFile(t, pod, c, secrets, "SOPS_AGE_KEY_FILE", f)
		if _, v := mountOf(pod, c, f); v != nil && v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional) {
			t.Errorf("the Secret %s of SOPS_AGE_KEY_FILE is not optional: serve would not start without SOPS", v.Secret.SecretName)
		}
	}

	// The secrets serve reads from the environment (its flags' help names
	// them) come from a Secret of deploy/.
	envs := secretEnvs(cmd)
	if len(envs) < 2 {
		t.Errorf("serve's flags name %d environment variables (%v), want the git token's and the webhook secret's", len(envs), envs)
	}
	for _, name := range envs {
		e := envVar(c, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("env %s is not taken from a Secret", name)
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if s := secrets[ref.Name]; s == nil || !hasKey(s, ref.Key) {
			t.Errorf("env %s: Secret %s has no key %s in deploy/", name, ref.Name, ref.Key)
		}
	}

	// The HTTP server: port, probes, Service.
	_, portText, _ := strings.Cut(str("listen"), ":")
	port, err := strconv.Atoi(portText)
	if err != nil || port != 8080 {
		t.Errorf("--listen %q, want port 8080", str("listen"))
	}
	var httpPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].ContainerPort == int32(port) {
			httpPort = &c.Ports[i]
		}
	}
	if httpPort == nil || httpPort.Name == "" {
		t.Fatalf("no named container port %d (--listen)", port)
	}
	for name, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"readiness": {c.ReadinessProbe, "/readyz"}, "liveness": {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || (g.Port.String() != httpPort.Name && g.Port.IntValue() != port) {
			t.Errorf("%s probe %s on port %s, want %s on %s", name, g.Path, g.Port.String(), p.path, httpPort.Name)
		}
	}
	svc := only[*corev1.Service](t, objs)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the pods do not have", svc.Name, k, v)
		}
	}
	if len(svc.Spec.Ports) == 0 || (svc.Spec.Ports[0].TargetPort.String() != httpPort.Name && svc.Spec.Ports[0].TargetPort.IntValue() != port) {
		t.Errorf("Service %s does not send to container port %s", svc.Name, httpPort.Name)
	}

	// Hardening.
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the pod does not run as a non-root user")
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is not read-only")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("privilege escalation is not turned off")
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory request or limit")
	}
}

// secretEnvs are the environment variables serve's flags say they fall
// back to ("else $RIGGER_…").
func secretEnvs(cmd *cobra.Command) []string {
	var envs []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, m := range regexp.MustCompile(`\$(RIGGER_[A-Z_]+)`).FindAllStringSubmatch(f.Usage, -1) {
			if !slices.Contains(envs, m[1]) {
				envs = append(envs, m[1])
			}
		}
	})
	return envs
}

// checkSecretFile checks that file is a key of a Secret of deploy/ mounted
// in the container.
func checkSecretFile(t *testing.T, pod corev1.PodSpec, c corev1.Container, secrets map[string]*corev1.Secret, what, file string) {
	t.Helper()
	m, v := mountOf(pod, c, file)
	if v == nil || v.Secret == nil {
		t.Errorf("%s: %s is not on a Secret volume", what, file)
		return
	}
	s := secrets[v.Secret.SecretName]
	if s == nil {
		t.Errorf("%s: Secret %s is not in deploy/", what, v.Secret.SecretName)
		return
	}
	key := strings.TrimPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
	for _, it := range v.Secret.Items {
		if it.Path == key {
			key = it.Key
		}
	}
	if !hasKey(s, key) {
		t.Errorf("%s: %s is key %q of Secret %s, which it does not have", what, file, key, s.Name)
	}
}

// mountOf is the container's mount that holds p (the deepest) and its
// volume; nil when none does.
func mountOf(pod corev1.PodSpec, c corev1.Container, p string) (*corev1.VolumeMount, *corev1.Volume) {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	for i, v := range pod.Volumes {
		if v.Name == best.Name {
			return best, &pod.Volumes[i]
		}
	}
	return best, nil
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envValue(c corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

func hasKey(s *corev1.Secret, key string) bool {
	_, a := s.StringData[key]
	_, b := s.Data[key]
	return a || b
}

func objectNamespace(obj runtime.Object) string {
	if o, ok := obj.(interface{ GetNamespace() string }); ok {
		return o.GetNamespace()
	}
	return ""
}

func kindName(obj runtime.Object) string {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	name := ""
	if o, ok := obj.(interface{ GetName() string }); ok {
		name = o.GetName()
	}
	if err != nil || len(gvks) == 0 {
		return "?/" + name
	}
	return gvks[0].Kind + "/" + name
}

// TestDeployDisruptionBudget: a drain keeps one replica of the Deployment
// running (the budget selects its pods and allows fewer than it has), and
// the replicas spread over the nodes without refusing a one-node cluster.
func TestDeployDisruptionBudget(t *testing.T) {
	objs := loadDeploy(t)
	d := only[*appsv1.Deployment](t, objs)
	pdb := only[*policyv1.PodDisruptionBudget](t, objs)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget %s selects %v (%v), not the Deployment's pods %v", pdb.Name, pdb.Spec.Selector, err, d.Spec.Template.Labels)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || int32(pdb.Spec.MinAvailable.IntValue()) >= *d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget %s minAvailable %v with %d replicas: want at least 1 and fewer than the replicas, or a drain never ends", pdb.Name, pdb.Spec.MinAvailable, *d.Spec.Replicas)
	}
	spread := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != corev1.LabelHostname || spread[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("topologySpreadConstraints %+v: want the replicas spread over hostnames, scheduled anyway on one node", spread)
	}
}

// TestDeployAgentComponent builds an overlay of deploy/ with the agent
// component (deploy/agent) as docs/agent.md says: every pod listens for
// agents on the port the Service rigger-agent targets, with flags serve
// takes, and keeps the endpoint's records in Secrets, shared by the
// replicas.
func TestDeployAgentComponent(t *testing.T) {
	deploy, err := filepath.Abs(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, deploy) // kustomize refuses absolute paths
	if err != nil {
		t.Fatal(err)
	}
	// The overlay docs/gitops.md shows: the component, and the endpoint's
	// name replaced.
	k := "resources: [" + rel + "]\ncomponents: [" + filepath.Join(rel, "agent") + "]\n" + `patches:
  - target: {kind: Deployment, name: rigger}
    patch: |
      - op: test
        path: /spec/template/spec/containers/0/args/-1
        value: --agent-host=rigger-agent.example.com
      - op: replace
        path: /spec/template/spec/containers/0/args/-1
        value: --agent-host=agents.example.com
`
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build of an overlay with deploy/agent: %v", err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocuments(y)
	if err != nil {
		t.Fatal(err)
	}
	var objs []deployObject
	for _, doc := range docs {
		obj, _, err := strictDecoder().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, deployObject{obj: obj})
	}
	d := only[*appsv1.Deployment](t, objs)
	c := d.Spec.Template.Spec.Containers[0]
	cmd := newServeCommand()
	if err := cmd.ParseFlags(c.Args[1:]); err != nil {
		t.Fatalf("serve %v: %v", c.Args[1:], err)
	}
	fl := cmd.Flags()
	listen, _ := fl.GetString("agent-listen")
	hosts, _ := fl.GetStringSlice("agent-host")
	backend, _ := fl.GetString("state-backend")
	if listen != ":9443" || !slices.Equal(hosts, []string{"agents.example.com"}) || backend != stateBackendKubernetes {
		t.Errorf("serve's --agent-listen %q, --agent-host %v, --state-backend %q; want :9443, the overlay's host, kubernetes", listen, hosts, backend)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "agent" && p.ContainerPort == 9443 }) {
		t.Errorf("container ports %+v, want agent 9443", c.Ports)
	}
	var agentSvc *corev1.Service
	for _, s := range all[*corev1.Service](objs) {
		if s.Name == "rigger-agent" {
			agentSvc = s
		}
	}
	switch {
	case agentSvc == nil:
		t.Fatal("no Service rigger-agent")
	case agentSvc.Namespace != "rigger-system" || len(agentSvc.Spec.Ports) != 1 || agentSvc.Spec.Ports[0].TargetPort.StrVal != "agent":
		t.Errorf("Service rigger-agent: %+v", agentSvc)
	case !labels.SelectorFromSet(agentSvc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)):
		t.Errorf("Service rigger-agent selects %v, not the pods (%v)", agentSvc.Spec.Selector, d.Spec.Template.Labels)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Error("no POD_IP from status.podIP: the replicas reach each other's agent endpoint there")
	}
}
