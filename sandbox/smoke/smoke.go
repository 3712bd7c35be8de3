// Package smoke checks that a cluster runs workloads across its nodes: a
// web server pod on one node, behind a Service, fetched from a pod on
// another node by its IP (the pod network) and by the Service's name (the
// cluster DNS and kube-proxy too), the answers read through the API
// server (kubectl logs: the API server reaching the kubelet). `rigger
// sandbox smoke` and the add-ons' end-to-end test run it.
package smoke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Namespace holds the check's objects; it is deleted afterwards.
const Namespace = "rigger-smoke"

// Check is one run of the check.
type Check struct {
	Client kubernetes.Interface
	// Image has busybox at /bin/busybox (httpd, wget, sh): the sandbox's
	// tools image.
	Image string
	// Server and Client are the Nodes (by name) the web server and the
	// fetching pods run on.
	ServerNode, ClientNode string
	// Timeout bounds each wait (a pod running, a fetch done).
	Timeout time.Duration
	// Progress, when set, is told each step.
	Progress func(msg string)
}

// Result is what the fetching pods read.
type Result struct {
	// PodIP is the web server pod's; ByIP what was fetched from it.
	PodIP, ByIP string
	// Service is the name fetched; ByName what it answered.
	Service, ByName string
}

// Run runs the check and removes what it made, also when it fails. The
// web server answers "hello from <server node>": both fetches must read it.
func (c Check) Run(ctx context.Context) (*Result, error) {
	if c.Timeout <= 0 {
		c.Timeout = 3 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w (left by an earlier check? delete it)", Namespace, err)
	}
	defer func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), Namespace, metav1.DeleteOptions{})
	}()
	pod, err := c.server(ctx)
	if err != nil {
		return nil, err
	}
	want := "hello from " + c.ServerNode
	res := &Result{PodIP: pod.Status.PodIP, Service: "web." + Namespace + ".svc.cluster.local"}
	c.Progress(fmt.Sprintf("web server pod on %s, IP %s, behind Service %s", c.ServerNode, res.PodIP, res.Service))
	for _, f := range []struct {
		name, target string
		out          *string
	}{{"by-ip", res.PodIP, &res.ByIP}, {"by-name", res.Service, &res.ByName}} {
		if *f.out, err = c.fetch(ctx, f.name, f.target); err != nil {
			return res, err
		}
		if strings.TrimSpace(*f.out) != want {
			return res, fmt.Errorf("a pod on %s fetched %q from %s, want %q", c.ClientNode, *f.out, f.target, want)
		}
		c.Progress(fmt.Sprintf("a pod on %s fetched %s: %q", c.ClientNode, f.target, strings.TrimSpace(*f.out)))
	}
	return res, nil
}

// server runs busybox httpd on ServerNode behind the Service web, and
// returns its pod once it runs.
func (c Check) server(ctx context.Context) (*corev1.Pod, error) {
	labels := map[string]string{"app": "web"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: c.ServerNode},
			Containers: []corev1.Container{{Name: "httpd", Image: c.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/busybox", "sh", "-c",
					`mkdir -p /tmp/www && echo "hello from ` + c.ServerNode + `" > /tmp/www/index.html && exec /bin/busybox httpd -f -p 8080 -h /tmp/www`},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the web server pod: %w", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	if _, err := c.Client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the web Service: %w", err)
	}
	var running *corev1.Pod
	last := errors.New("not read yet")
	err := wait.PollUntilContextTimeout(ctx, time.Second, c.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, "web", metav1.GetOptions{})
		switch {
		case err != nil:
			last = err
		case p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "":
			last = fmt.Errorf("phase %s, conditions %s", p.Status.Phase, conditions(p.Status.Conditions))
		default:
			running = p
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the web server pod on %s does not run after %s: %v", c.ServerNode, c.Timeout, last)
	}
	return running, nil
}

// fetch runs a Job on ClientNode that GETs /index.html from host:8080 and
// returns the page. It speaks HTTP with busybox nc: the wget of Debian's
// busybox-static, of which the sandbox's tools image is made, crashes
// outside a full root file system.
func (c Check) fetch(ctx context.Context, name, host string) (string, error) {
	url := "http://" + host + ":8080/index.html"
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(6)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  map[string]string{corev1.LabelHostname: c.ClientNode},
				Containers: []corev1.Container{{Name: "get", Image: c.Image, ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"/bin/busybox", "sh", "-c",
						`printf 'GET /index.html HTTP/1.0\r\nHost: %s\r\n\r\n' "$0" | /bin/busybox nc -w 5 "$0" 8080 > /tmp/out && ` +
							`/bin/busybox grep -q '^HTTP/1.[01] 200' /tmp/out && /bin/busybox sed '1,/^\r*$/d' /tmp/out`, host}}},
			}},
		},
	}
	if _, err := c.Client.BatchV1().Jobs(Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create job %s: %w", name, err)
	}
	last := errors.New("not read yet")
	var failed error
	err := wait.PollUntilContextTimeout(ctx, time.Second, c.Timeout, true, func(ctx context.Context) (bool, error) {
		j, err := c.Client.BatchV1().Jobs(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		for _, cond := range j.Status.Conditions {
			switch {
			case cond.Status != corev1.ConditionTrue:
			case cond.Type == batchv1.JobComplete:
				return true, nil
			case cond.Type == batchv1.JobFailed:
				failed = fmt.Errorf("job %s fetching %s failed: %s: %s", name, url, cond.Reason, cond.Message)
				return false, failed
			}
		}
		last = fmt.Errorf("job conditions %v", j.Status.Conditions)
		return false, nil
	})
	logs, lerr := c.logs(ctx, name)
	switch {
	case failed != nil:
		return logs, fmt.Errorf("%w; its output: %q", failed, logs)
	case err != nil:
		return logs, fmt.Errorf("job %s fetching %s not done after %s: %v; its output: %q", name, url, c.Timeout, last, logs)
	case lerr != nil:
		return "", lerr
	}
	return logs, nil
}

// logs are the logs of the Job's pods, through the API server (which
// reaches the kubelet: kubectl logs).
func (c Check) logs(ctx context.Context, job string) (string, error) {
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return "", fmt.Errorf("list the pods of job %s: %w", job, err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		out, err := c.Client.CoreV1().Pods(Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil && !apierrors.IsBadRequest(err) { // a pod that never started has none
			return "", fmt.Errorf("logs of pod %s (kubectl logs: the API server reaching the kubelet): %w", p.Name, err)
		}
		b.Write(out)
	}
	return b.String(), nil
}

func conditions(cs []corev1.PodCondition) string {
	var parts []string
	for _, c := range cs {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Message != "" {
			s += " (" + c.Message + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
