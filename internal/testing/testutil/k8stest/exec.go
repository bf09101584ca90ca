package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"
)

// IdlePod runs a pod named name in ns that does nothing but wait to be exec'd into, from image (one the
// cluster already holds: it is never pulled), and returns its address once it runs. It meets the restricted
// Pod Security Standard that Namespace's namespaces enforce.
func (c *Cluster) IdlePod(t *testing.T, ns, name, image string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			// sleep, as process 1, ignores SIGTERM: a deletion would wait out the whole grace period.
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(int64(65534)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "idle", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sleep", "infinity"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	running, err := c.waitForPod(ctx, ns, name)
	if err != nil {
		t.Fatalf("waiting for pod %s/%s to run: %v", ns, name, err)
	}
	return running.Status.PodIP
}

// waitForPod returns the pod once it is Ready, and fails at once when it has stopped for good.
func (c *Cluster) waitForPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	check := func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s/%s stopped: %s %s", ns, name, p.Status.Reason, p.Status.Message)
		}
		return podReady(p), nil
	}
	for {
		l, err := c.cs.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			if done, err := check(&l.Items[i]); done || err != nil {
				return &l.Items[i], err
			}
		}
		w, err := c.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: opts.FieldSelector, ResourceVersion: l.ResourceVersion})
		if err != nil {
			return nil, err
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted {
				if done, err := check(p); done || err != nil {
					w.Stop()
					return p, err
				}
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		// The watch closed (a server timeout, a 410): list again.
	}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ReadyPod returns the name and address of a Ready pod in ns labelled label=value that is not being deleted (a
// rollout's old pods are).
func (c *Cluster) ReadyPod(ctx context.Context, ns, label, value string) (name, ip string, err error) {
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + value})
	if err != nil {
		return "", "", err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) {
			return p.Name, p.Status.PodIP, nil
		}
	}
	return "", "", fmt.Errorf("no Ready pod in %s labelled %s=%s among %d", ns, label, value, len(pods.Items))
}

// ExecResult is what a command run in a container left: its exit code and output.
type ExecResult struct {
	Code           int
	Stdout, Stderr string
}

// Exec runs command in the first container of pod, through the API server as `kubectl exec` does (WebSocket).
// A command that ran and exited non-zero is a result with its code, not an error: the error is kept for a
// command that could not be run, so a test never takes a broken exec for a refused connection.
func (c *Cluster) Exec(ctx context.Context, ns, pod string, command ...string) (ExecResult, error) {
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	executor, err := remotecommand.NewWebSocketExecutor(c.rc, "GET", req.URL().String())
	if err != nil {
		return ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit exec.CodeExitError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &exit):
		res.Code = exit.ExitStatus()
		return res, nil
	default:
		return res, fmt.Errorf("exec %v in %s/%s: %w", command, ns, pod, err)
	}
}
