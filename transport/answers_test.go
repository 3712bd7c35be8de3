package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"golang.org/x/sync/semaphore"
)

func TestBoundOf(t *testing.T) {
	tests := []struct {
		method, path string
		kind         answerKind
		maxBytes     int64
		items        int
		slow         bool
	}{
		{"GET", "/v1.45/version", answerJSON, DockerMaxVersion, 0, false},
		{"HEAD", "/_ping", answerJSON, DockerMaxVersion, 0, false},
		{"GET", "/v1.41/info", answerJSON, DockerMaxInspect, 0, false},
		{"GET", "/v1.41/containers/json", answerJSON, DockerMaxList, DockerMaxListEntries, false},
		{"GET", "/v1.41/images/json", answerJSON, DockerMaxList, DockerMaxListEntries, false},
		{"GET", "/v1.41/containers/etcd/json", answerJSON, DockerMaxInspect, 0, false},
		{"GET", "/v1.41/images/rancher/rke-tools:v1/json", answerJSON, DockerMaxInspect, 0, false},
		{"POST", "/v1.41/containers/create", answerJSON, DockerMaxSmall, 0, false},
		{"POST", "/v1.41/containers/abc/wait", answerJSON, DockerMaxSmall, 0, true},
		{"POST", "/v1.41/images/create", answerProgress, DockerMaxProgress, 0, false},
		{"GET", "/v1.41/events", answerProgress, DockerMaxProgress, 0, false},
		{"GET", "/v1.41/containers/abc/archive", answerRaw, 0, 0, false},
		{"GET", "/v1.41/containers/abc/logs", answerRaw, 0, 0, false},
		{"POST", "/v1.41/exec/abc/start", answerRaw, 0, 0, false},
		{"POST", "/v1.41/containers/abc/start", answerJSON, DockerMaxSmall, 0, false},
	}
	for _, tt := range tests {
		b := boundOf(tt.method, tt.path)
		if b.kind != tt.kind || b.maxBytes != tt.maxBytes || b.maxItems != tt.items || b.slow != tt.slow {
			t.Errorf("boundOf(%s %s) = %+v, want kind %d, %d bytes, %d entries, slow %v", tt.method, tt.path, b, tt.kind, tt.maxBytes, tt.items, tt.slow)
		}
	}
}

// answers is a RoundTripper that answers every request with the body its
// path is mapped to.
type answers map[string]func() io.Reader

func (a answers) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(a[r.URL.Path]()), Request: r}, nil
}

func get(t *testing.T, rt http.RoundTripper, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://docker"+path, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestNodeBudget: the answers a node has in flight draw from one budget;
// past it, an answer fails naming the node, and what a closed answer drew
// is given back.
func TestNodeBudget(t *testing.T) {
	list := func() io.Reader { return strings.NewReader("[" + strings.Repeat(`{"Id":"c"},`, 800) + `{}]`) }
	b := &boundedAnswers{next: answers{"/containers/json": list}, node: "n1", budget: semaphore.NewWeighted(2 << 20), budgetSize: 2 << 20, timeout: time.Minute}
	first := get(t, b, "/containers/json")
	if _, err := io.ReadAll(first.Body); err != nil {
		t.Fatalf("the first list, within the budget: %v", err)
	}
	second := get(t, b, "/containers/json")
	_, err := io.ReadAll(second.Body)
	var be *DockerBudgetError
	if !errors.As(err, &be) || be.Pool || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "2 MiB") {
		t.Fatalf("a second list while the first is open: %v, want the node's *DockerBudgetError", err)
	}
	second.Body.Close()
	first.Body.Close()
	third := get(t, b, "/containers/json")
	defer third.Body.Close()
	if _, err := io.ReadAll(third.Body); err != nil {
		t.Fatalf("a list once the others were closed: %v", err)
	}
}

// TestAnswerPool: every node's answers draw from the pool too.
func TestAnswerPool(t *testing.T) {
	list := func() io.Reader { return strings.NewReader("[" + strings.Repeat(`{"Id":"c"},`, 800) + `{}]`) }
	pool := NewAnswerPool(2 << 20)
	node := func(name string) *boundedAnswers {
		return &boundedAnswers{next: answers{"/containers/json": list}, node: name, budget: semaphore.NewWeighted(DockerNodeBudget),
			budgetSize: DockerNodeBudget, pool: pool, timeout: time.Minute}
	}
	first := get(t, node("n1"), "/containers/json")
	if _, err := io.ReadAll(first.Body); err != nil {
		t.Fatal(err)
	}
	n2 := node("n2")
	second := get(t, n2, "/containers/json")
	_, err := io.ReadAll(second.Body)
	var be *DockerBudgetError
	if !errors.As(err, &be) || !be.Pool || !strings.Contains(err.Error(), "node n2") {
		t.Fatalf("n2's list while n1's holds the pool: %v, want the pool's *DockerBudgetError", err)
	}
	second.Body.Close()
	if cur := n2.budget.TryAcquire(DockerNodeBudget); !cur {
		t.Error("n2's failed answer kept some of its budget")
	}
	first.Body.Close()
	if !pool.sem.TryAcquire(2 << 20) {
		t.Error("the closed answers kept some of the pool")
	}
}

// TestAnswerTimeout: an answer whose body stops coming fails in bounded
// time, and gives back what it drew.
func TestAnswerTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`[{"Id":"c1"},`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	b := &boundedAnswers{next: http.DefaultTransport, node: "n1", budget: semaphore.NewWeighted(DockerNodeBudget),
		budgetSize: DockerNodeBudget, timeout: 200 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1.41/containers/json", nil)
	start := time.Now()
	resp, err := b.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	var te *DockerAnswerTimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "node n1") {
		t.Fatalf("an answer that stops: %v, want a *DockerAnswerTimeoutError", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the answer failed after %s, want about 200ms", took)
	}
	if !b.budget.TryAcquire(DockerNodeBudget) {
		t.Error("the answer that timed out kept some of the node's budget")
	}
}

// TestWeighingARealNode: the answers of a node as Kubernetes runs them
// pass, with room to spare: a thousand containers, each labelled as the
// kubelet labels them, with its mounts and host network. The weight
// bounds what decoding costs.
func TestWeighingARealNode(t *testing.T) {
	const n = 1000
	list := make([]container.Summary, n)
	for i := range list {
		labels := map[string]string{}
		for _, k := range []string{"io.kubernetes.container.name", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
			"io.kubernetes.pod.uid", "io.kubernetes.container.hash", "io.kubernetes.container.restartCount",
			"io.kubernetes.container.terminationMessagePath", "io.kubernetes.container.terminationMessagePolicy",
			"io.kubernetes.docker.type", "io.kubernetes.sandbox.id", "annotation.io.kubernetes.container.hash",
			"annotation.io.kubernetes.pod.terminationGracePeriod"} {
			labels[k] = fmt.Sprintf("value-of-%s-%d", k, i)
		}
		var mounts []container.MountPoint
		for j := range 6 {
			mounts = append(mounts, container.MountPoint{Type: "bind", Source: fmt.Sprintf("/var/lib/kubelet/pods/%d/volumes/%d", i, j),
				Destination: fmt.Sprintf("/var/run/secrets/%d", j), Mode: "ro", RW: false, Propagation: "rprivate"})
		}
		list[i] = container.Summary{ID: strings.Repeat("a", 64), Names: []string{fmt.Sprintf("/k8s_app_pod-%d_default_uid_0", i)},
			Image: "registry.example/app:v1", ImageID: "sha256:" + strings.Repeat("b", 64), Command: "/app --serve",
			Created: 1700000000, Labels: labels, State: "running", Status: "Up 3 hours", Mounts: mounts,
			NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"host": {NetworkID: strings.Repeat("c", 64)}}}}
		list[i].HostConfig.NetworkMode = "host"
	}
	body, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	var w answerWeigher
	weight := w.weigh(body)
	if w.items != n {
		t.Errorf("counted %d entries, want %d", w.items, n)
	}
	if weight > DockerNodeBudget*3/4 {
		t.Errorf("the list of a node with %d containers (%d KiB) weighs %d MiB, too close to the budget of %d MiB",
			n, len(body)>>10, weight>>20, DockerNodeBudget>>20)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var decoded []container.Summary
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if cost := int64(m1.TotalAlloc - m0.TotalAlloc); cost > weight {
		t.Errorf("decoding cost %d KiB, more than the weight of %d KiB", cost>>10, weight>>10)
	}
	t.Logf("%d containers: %d KiB of JSON, weight %d KiB, decoded with %d KiB", n, len(body)>>10, weight>>10, (m1.TotalAlloc-m0.TotalAlloc)>>10)
}

// TestWeigherBoundsDecoding: whatever the text, its weight is more than
// what decoding it into Docker's types allocates.
func TestWeigherBoundsDecoding(t *testing.T) {
	texts := map[string]string{
		"empty objects":  "[" + strings.Repeat("{},", 50000) + "{}]",
		"names":          `[{"Names":[` + strings.Repeat(`"",`, 50000) + `""]}]`,
		"mounts":         `[{"Mounts":[` + strings.Repeat(`{},`, 50000) + `{}]}]`,
		"ports":          `[{"Ports":[` + strings.Repeat(`{},`, 50000) + `{}]}]`,
		"a long string":  `[{"Image":"` + strings.Repeat("a", 1<<20) + `"}]`,
		"nested arrays":  `[{"Names":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}]`,
		"escaped quotes": `[{"Image":"` + strings.Repeat(`\"`, 50000) + `"}]`,
	}
	var b strings.Builder
	b.WriteString(`[{"Labels":{`)
	for i := range 50000 {
		fmt.Fprintf(&b, `"%d":"",`, i)
	}
	b.WriteString(`"x":""}}]`)
	texts["labels"] = b.String()
	b.Reset()
	b.WriteString(`[{"NetworkSettings":{"Networks":{`)
	for i := range 50000 {
		fmt.Fprintf(&b, `"%d":{},`, i)
	}
	b.WriteString(`"x":{}}}}]`)
	texts["networks"] = b.String()
	for name, text := range texts {
		var w answerWeigher
		weight := w.weigh([]byte(text))
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var decoded []container.Summary
		_ = json.NewDecoder(strings.NewReader(text)).Decode(&decoded)
		runtime.ReadMemStats(&m1)
		if cost := int64(m1.TotalAlloc - m0.TotalAlloc); cost > weight {
			t.Errorf("%s: decoding allocated %d KiB, more than the weight of %d KiB", name, cost>>10, weight>>10)
		}
		runtime.KeepAlive(decoded)
	}
}
