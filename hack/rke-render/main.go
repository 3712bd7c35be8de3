// Command rke-render runs RKE v1.8.14's own code on cluster.yml files, so
// that rigger can be compared with RKE: the system add-ons RKE deploys
// (reconcile/sysaddons TestEquivalentToRKE), what RKE's parser reads and the
// file `rke config` writes (spec TestAgainstRKE).
//
//	go run . -out DIR cluster1.yml cluster2.yml ...          # add-ons
//	go run . -parse -out DIR cluster1.yml cluster2.yml ...   # parsed config
//	go run . -keys                                           # keys RKE reads
//	go run . -config FILE [-empty]                           # `rke config`
//	go run . -docker < versions                              # Docker check
//	go run . -registries < query.json                        # registry auth
//	go run . -rkestate FILE cluster.yml                      # rke up
//
// With -parse, it reads each file with RKE's cluster.ParseConfig and writes
// what RKE read, as JSON with RKE's json names, to DIR/<name>/config.json,
// then applies RKE's defaults and validation (cluster.InitClusterObject) and
// writes the result to DIR/<name>/defaulted.json; RKE's errors go to
// error.txt and init-error.txt there (parse.go).
//
// With -keys, it prints every key RKE's parser reads, with how it reads it
// (keys.go): the path and `yaml` (yaml.v2, exact name), `json-fold`
// (encoding/json, any case) or `object` (a Kubernetes object).
//
// With -config, it runs RKE's `rke config` command (github.com/rancher/rke/cmd)
// for one host, 10.0.0.1, with every role, giving the default answer to
// every other question, or `rke config --empty` with -empty, and has it
// write FILE (config.go).
//
// With -docker, it reads lines `kubernetes_version<TAB>Docker version` and
// prints RKE's answer to each: `supported`, `unsupported` or `error`
// (docker.go).
//
// With -registries, it reads private registries and image names as JSON
// and prints, as JSON, the credentials RKE gives each image's pull
// (docker.GetImageRegistryConfig) and the Docker config it has the kubelet
// write (docker.GetKubeletDockerConfig) (registries.go).
//
// With -rkestate, it writes the cluster.rkestate `rke up` writes for a
// cluster.yml (certificates and keys RKE generates, its encryption config)
// (adopt.go). rigger adopt is tested against it.
//
// Without these flags it renders the add-ons:
// For each file it runs what `rke up` runs for the add-ons: RKE's
// cluster.ParseConfig and cluster.InitClusterObject (RKE's parsing,
// defaults and validation), then cluster.ConfigureCluster, which deploys
// the network plugin, DNS, nodelocal, metrics-server and the ingress
// controller exactly as `rke up` does (same data maps, same templates, same
// option parsing). RKE stores every add-on's manifest in a ConfigMap named
// after the add-on before it runs the job that applies it; the Kubernetes
// API it talks to here is a small in-process fake that records those
// ConfigMaps, answers that the deploy jobs complete, and has one Node per
// node of cluster.yml. Nothing leaves the process.
//
// It writes DIR/<file name without .yml>/<add-on>.yaml for each add-on, in
// the order RKE deployed them also listed in DIR/<name>/order, RKE's
// warnings to DIR/<name>/warnings.txt and, when RKE fails, its error to
// DIR/<name>/error.txt.
//
// The RKE it builds against (go.mod) must be the RKE whose metadata
// spec/rkemeta holds; the test checks that they agree.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rancher/rke/cluster"
	"github.com/rancher/rke/hosts"
	"github.com/rancher/rke/pki"
	"github.com/sirupsen/logrus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	out := flag.String("out", "", "directory to write the rendered add-ons (or with -parse, what RKE read) to")
	parse := flag.Bool("parse", false, "write what RKE's ParseConfig reads of each file instead of rendering the add-ons")
	keys := flag.Bool("keys", false, "print every key RKE reads from cluster.yml")
	config := flag.String("config", "", "write the cluster.yml `rke config` writes with its default answers to this file")
	empty := flag.Bool("empty", false, "with -config: `rke config --empty`")
	dockerCheck := flag.Bool("docker", false, "read kubernetes_version<TAB>Docker version lines and print RKE's check of each")
	registries := flag.Bool("registries", false, "read private registries and images (JSON) and print the credentials RKE gives each pull")
	rkestate := flag.String("rkestate", "", "write the cluster.rkestate `rke up` writes for the one cluster.yml given to this file")
	flag.Parse()
	switch {
	case *rkestate != "":
		if flag.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "usage: rke-render -rkestate FILE cluster.yml")
			os.Exit(2)
		}
		logrus.SetOutput(io.Discard)
		if err := rkeUpState(flag.Arg(0), *rkestate); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	case *registries:
		if err := registryAuth(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	case *dockerCheck:
		if err := checkDocker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	case *keys:
		if err := listKeys(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	case *config != "":
		if err := rkeConfig(*config, *empty); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	case *out == "" || flag.NArg() == 0:
		fmt.Fprintln(os.Stderr, "usage: rke-render [-parse] -out DIR cluster.yml... | -keys | -config FILE [-empty] | -docker | -registries")
		os.Exit(2)
	}
	if os.Getenv("RKE_RENDER_DEBUG") == "" {
		logrus.SetOutput(io.Discard)
	}
	logrus.SetLevel(logrus.WarnLevel)
	if os.Getenv("RKE_RENDER_DEBUG") != "" {
		logrus.SetLevel(logrus.DebugLevel)
	}
	failed := false
	run := renderFile
	if *parse {
		run = parseFile
	}
	for _, f := range flag.Args() {
		if err := run(f, *out); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// warnings records RKE's warnings (it logs a failed add-on as a warning and
// goes on).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }
func (w *warnings) Fire(e *logrus.Entry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, e.Message)
	return nil
}

func renderFile(path, out string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	dir := filepath.Join(out, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// RKE keeps its kubeconfig beside cluster.yml: work in a directory of
	// our own.
	work, err := os.MkdirTemp("", "rke-render-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	clusterFile := filepath.Join(work, "cluster.yml")
	if err := os.WriteFile(clusterFile, text, 0o600); err != nil {
		return err
	}

	w := &warnings{}
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(w)

	api := newFakeAPI()
	srv := httptest.NewServer(api)
	defer srv.Close()

	rkeErr := render(clusterFile, srv.URL, api)
	var order []string
	for _, cm := range api.configMaps {
		order = append(order, cm.name)
		if err := os.WriteFile(filepath.Join(dir, cm.name+".yaml"), []byte(cm.yaml), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "order"), []byte(strings.Join(order, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "warnings.txt"), []byte(strings.Join(w.msgs, "\n")), 0o644); err != nil {
		return err
	}
	if rkeErr != nil {
		return os.WriteFile(filepath.Join(dir, "error.txt"), []byte(rkeErr.Error()), 0o644)
	}
	return nil
}

// render runs RKE as `rke up` does, from parsing cluster.yml to
// ConfigureCluster.
func render(clusterFile, apiURL string, api *fakeAPI) error {
	ctx := context.Background()
	text, err := os.ReadFile(clusterFile)
	if err != nil {
		return err
	}
	rkeConfig, err := cluster.ParseConfig(string(text))
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	flags := cluster.ExternalFlags{ClusterFilePath: clusterFile}
	kubeCluster, err := cluster.InitClusterObject(ctx, rkeConfig, flags, "")
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	for _, n := range kubeCluster.Nodes {
		api.nodes = append(api.nodes, n.HostnameOverride)
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
current-context: fake
users:
- name: fake
  user:
    token: fake
`, apiURL)
	if err := os.WriteFile(pki.GetLocalKubeConfig(clusterFile, ""), []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	return cluster.ConfigureCluster(ctx, kubeCluster.RancherKubernetesEngineConfig, nil, flags, hosts.DialersOptions{}, map[string]interface{}{}, false)
}

type configMap struct{ name, yaml string }

// fakeAPI answers the few requests RKE's add-on deployment makes.
type fakeAPI struct {
	mu         sync.Mutex
	nodes      []string
	configMaps []configMap
	jobs       map[string]bool
}

func newFakeAPI() *fakeAPI { return &fakeAPI{jobs: map[string]bool{}} }

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := r.URL.Path
	if os.Getenv("RKE_RENDER_DEBUG") != "" {
		fmt.Fprintln(os.Stderr, "fake API:", r.Method, r.URL)
	}
	switch {
	case r.Method == http.MethodGet && p == "/api/v1/nodes":
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
		for _, n := range a.nodes {
			list.Items = append(list.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}})
		}
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodPost && p == "/api/v1/namespaces/kube-system/configmaps":
		var cm corev1.ConfigMap
		if err := decodeBody(r, &cm); err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, "BadRequest", err.Error()))
			return
		}
		a.configMaps = append(a.configMaps, configMap{cm.Name, cm.Data[cm.Name]})
		writeJSON(w, http.StatusCreated, cm)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/apis/batch/v1/namespaces/") && strings.HasSuffix(p, "/jobs"):
		var job batchv1.Job
		if err := decodeBody(r, &job); err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, "BadRequest", err.Error()))
			return
		}
		a.jobs[p+"/"+job.Name] = true
		writeJSON(w, http.StatusCreated, job)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/apis/batch/v1/namespaces/") && a.jobs[p]:
		job := batchv1.Job{
			TypeMeta:   metav1.TypeMeta{Kind: "Job", APIVersion: "batch/v1"},
			ObjectMeta: metav1.ObjectMeta{Name: filepath.Base(p)},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
			}},
		}
		writeJSON(w, http.StatusOK, job)
	case r.Method == http.MethodGet || r.Method == http.MethodDelete:
		// Nothing else exists: RKE's "does it exist?" and "delete if it
		// exists" calls get NotFound.
		writeJSON(w, http.StatusNotFound, status(http.StatusNotFound, "NotFound", p+" not found"))
	default:
		writeJSON(w, http.StatusMethodNotAllowed, status(http.StatusMethodNotAllowed, "MethodNotAllowed", errors.New(r.Method+" "+p).Error()))
	}
}

// decodeBody reads a request's object, JSON or protobuf (client-go's
// clientset may send either).
func decodeBody(r *http.Request, into runtime.Object) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, into)
	return err
}

func status(code int32, reason metav1.StatusReason, msg string) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
