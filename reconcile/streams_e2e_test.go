package reconcile_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/rigger/rigger/reconcile/internal/podstatus"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// checkStreams checks what a user does with pods through the API server,
// each the way kubectl does it (WebSockets first, SPDY when the API server
// refuses the upgrade), against the workload of startWorkload in ns:
// `kubectl exec` in a web pod, `kubectl port-forward` to its port 8080,
// `kubectl logs -f` of a pod that prints a line a second, `kubectl cp` into
// that pod and back (tar through exec's stdin and stdout) and `kubectl
// attach -i` to a pod that echoes its stdin. They go through
// the kubelet to cri-dockerd's streaming server, which is what a Kubernetes
// version can break (docs/versions.md: ExtendWebSocketsToKubelet).
func checkStreams(ctx context.Context, t *testing.T, cfg *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	const ns = "upgrade-load"
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pod := readyPod(ctx, t, cs, ns, "app=web")
	t.Run("exec", func(t *testing.T) {
		var out, errOut bytes.Buffer
		err := execIn(ctx, cfg, cs, ns, pod, []string{"/bin/busybox", "echo", "exec through cri-dockerd"}, &out, &errOut)
		if err != nil || out.String() != "exec through cri-dockerd\n" {
			t.Errorf("exec in %s: %v; stdout %q, stderr %q", pod, err, out.String(), errOut.String())
		}
	})
	t.Run("port-forward", func(t *testing.T) {
		body, err := portForwardGet(ctx, cfg, cs, ns, pod, 8080, "/index.html")
		if err != nil || body != "ok\n" {
			t.Errorf("port-forward to %s:8080: %v; body %q", pod, err, body)
		}
	})
	t.Run("logs -f", func(t *testing.T) {
		ticker := ensureTicker(ctx, t, cs, ns)
		lines, err := followLogs(ctx, cs, ns, ticker, 2)
		if err != nil {
			t.Errorf("logs -f of %s: %v (lines %q)", ticker, err, lines)
		}
	})
	t.Run("cp", func(t *testing.T) {
		ticker := ensureTicker(ctx, t, cs, ns)
		want := []byte(fmt.Sprintf("copied through cri-dockerd at %s\n", time.Now().Format(time.RFC3339Nano)))
		got, err := copyThrough(ctx, cfg, cs, ns, ticker, "rigger-cp.txt", want)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("cp into %s and back: %v; got %q, want %q", ticker, err, got, want)
		}
	})
	t.Run("attach", func(t *testing.T) {
		echo := ensureEcho(ctx, t, cs, ns)
		const line = "attached through cri-dockerd"
		if got, err := attachEcho(ctx, cfg, cs, ns, echo, line); err != nil || got != line {
			t.Errorf("attach to %s: %v; got %q, want %q", echo, err, got, line)
		}
	})
}

// readyPod returns a running, ready pod of ns with the labels.
func readyPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string) string {
	t.Helper()
	var name string
	rt.Eventually(ctx, t, 2*time.Minute, "a ready pod "+selector+" in "+ns, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podstatus.Ready(&p) {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}

// upgradeFallback is kubectl's rule for falling back from WebSockets to
// SPDY: only when the API server refused the upgrade.
func upgradeFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// execIn runs command in pod's first container, as kubectl exec does.
func execIn(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, command []string, stdout, stderr io.Writer) error {
	return execWith(ctx, cfg, cs, ns, pod, command, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// execWith runs command in pod's first container with the streams of o,
// as kubectl exec (and kubectl cp, which runs tar) does.
func execWith(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, command []string, o remotecommand.StreamOptions) error {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdin: o.Stdin != nil, Stdout: o.Stdout != nil, Stderr: o.Stderr != nil}, scheme.ParameterCodec)
	return stream(ctx, cfg, req, o)
}

// stream runs the exec or attach of req, as kubectl does: WebSockets first,
// SPDY when the API server refuses the upgrade.
func stream(ctx context.Context, cfg *rest.Config, req *rest.Request, o remotecommand.StreamOptions) error {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, upgradeFallback)
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, o)
}

// copyThrough copies a file into pod's /tmp and back out, as kubectl cp
// does both ways: a tar stream into `tar xf -` on exec's stdin, and out of
// `tar cf -` on its stdout. It returns what came back.
func copyThrough(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, name string, content []byte) ([]byte, error) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var errOut bytes.Buffer
	if err := execWith(ctx, cfg, cs, ns, pod, []string{"/bin/busybox", "tar", "xf", "-", "-C", "/tmp"},
		remotecommand.StreamOptions{Stdin: &in, Stdout: io.Discard, Stderr: &errOut}); err != nil {
		return nil, fmt.Errorf("copy into %s: %w (stderr %q)", pod, err, errOut.String())
	}
	var out bytes.Buffer
	errOut.Reset()
	if err := execWith(ctx, cfg, cs, ns, pod, []string{"/bin/busybox", "tar", "cf", "-", "-C", "/tmp", name},
		remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return nil, fmt.Errorf("copy out of %s: %w (stderr %q)", pod, err, errOut.String())
	}
	tr := tar.NewReader(&out)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("copy out of %s: %w", pod, err)
	}
	return io.ReadAll(io.LimitReader(tr, 1<<20))
}

// attachEcho attaches to pod's container, which echoes its stdin (cat),
// as kubectl attach -i does, writes line and returns the first line that
// comes back.
func attachEcho(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := stream(ctx, cfg, req, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: io.Discard})
		outW.CloseWithError(cmp.Or(err, io.EOF))
		done <- err
	}()
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Scan()
		got <- sc.Text()
	}()
	if _, err := io.WriteString(inW, line+"\n"); err != nil {
		return "", err
	}
	var answer string
	select {
	case answer = <-got:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	// Closing stdin detaches, as kubectl attach does when its input ends
	// (the container's stdin stays open: stdinOnce is unset).
	inW.Close()
	cancel()
	<-done
	return answer, nil
}

// ensureEcho makes (once) a Deployment whose container echoes its stdin,
// kept open (stdin, not stdinOnce), and returns its ready pod.
func ensureEcho(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	return ensurePod(ctx, t, cs, ns, corev1.Container{Name: "echo", Command: []string{"/bin/busybox", "cat"}, Stdin: true})
}

// portForwardGet forwards a local port to pod's port, as kubectl
// port-forward does (SPDY tunnelled over WebSockets first), and GETs path
// through it.
func portForwardGet(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, port int, path string) (string, error) {
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(url, cfg)
	if err != nil {
		return "", err
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	pf, err := portforward.NewOnAddresses(portforward.NewFallbackDialer(tunnel, spdyDialer, upgradeFallback),
		[]string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return "", fmt.Errorf("port-forward ended before it was ready: %w", err)
	case <-ctx.Done():
		return "", ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		return "", fmt.Errorf("forwarded ports %v: %v", ports, err)
	}
	reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return string(body), err
}

// ensureTicker makes (once) a Deployment whose pod prints a numbered line
// every second, and returns its ready pod.
func ensureTicker(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	return ensurePod(ctx, t, cs, ns, corev1.Container{Name: "ticker",
		Command: []string{"/bin/busybox", "sh", "-c", `i=0; while true; do echo "tick $i"; i=$((i+1)); /bin/busybox sleep 1; done`}})
}

// ensurePod makes (once) a Deployment of one pod in ns, named and
// labelled (app) for c, which runs on the sandbox's tools image, and
// returns its ready pod.
func ensurePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, c corev1.Container) string {
	t.Helper()
	labels := map[string]string{"app": c.Name}
	c.Image, c.ImagePullPolicy = sandbox.ToolsImage, corev1.PullIfNotPresent
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return readyPod(ctx, t, cs, ns, "app="+c.Name)
}

// followLogs follows pod's log, as kubectl logs -f does, until n new lines
// came (lines printed after it began).
func followLogs(ctx context.Context, cs kubernetes.Interface, ns, pod string, n int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	zero := int64(0)
	r, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true, TailLines: &zero}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var lines []string
	sc := bufio.NewScanner(r)
	for len(lines) < n && sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "tick ") {
			lines = append(lines, l)
		}
	}
	if len(lines) < n {
		return lines, fmt.Errorf("the stream ended after %d lines: %w", len(lines), cmp.Or(sc.Err(), ctx.Err(), io.EOF))
	}
	return lines, nil
}

// checkPause checks that the pods' sandboxes on every node run pause, the
// cluster's system_images.pod_infra_container: cri-dockerd starts them, and
// from Kubernetes 1.35 the kubelet no longer hands it the image (the
// sandbox's nodes have no registry to pull cri-dockerd's default from, as
// an air-gapped node has none).
func checkPause(ctx context.Context, t *testing.T, nodes []sandbox.Node, pause string) {
	t.Helper()
	seen := 0
	for _, n := range nodes {
		list, err := sandboxtest.DockerClient(t, n).ContainerList(ctx, container.ListOptions{
			Filters: filters.NewArgs(filters.Arg("label", "io.kubernetes.docker.type=podsandbox"))})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			seen++
			if c.Image != pause {
				t.Errorf("%s: pod sandbox %s runs %s, want %s", n.Address, c.Names, c.Image, pause)
			}
		}
	}
	if seen == 0 {
		t.Errorf("no pod sandboxes running on %d nodes", len(nodes))
	}
}
