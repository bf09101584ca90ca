package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	kbackend "github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// The data-plane benchmark's pods leg (scripts/bench-dataplane-k8s.sh) runs the proxy where the kubernetes
// backend runs it: a pod on the test cluster. The rendered subjects are made by the backend itself (Create,
// which renders the ConfigMap, the Secret with the login and the TLS key, the Deployment, and waits until it
// is Available); plain Squid is the same Deployment of the same image with the hand-written allow-all
// squid.conf in its ConfigMap instead, so that the two differ by their configuration alone.

// podProxyName is the name the pods' TLS certificate carries: the pod's address is known only once it runs.
const podProxyName = "proxy.dataplane.bench"

// runDataplanePod makes (create) or removes (delete) one subject's proxy in -namespace. create prints the
// pod's address and UID (ip=... uid=...) once it is ready, and writes in -dir what the clients need:
// client-auth (the Proxy-Authorization value, empty without a login) and, with TLS, ca.pem.
func runDataplanePod(ctx context.Context, args []string, _ io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dataplane-pod takes create or delete", errUsage)
	}
	op := args[0]
	fs := newFlagSet("dataplane-pod")
	kubeconfig := fs.String("kubeconfig", "", "the cluster's kubeconfig")
	ns := fs.String("namespace", "", "the namespace the proxy goes in")
	subject := fs.String("subject", "", "squid-plain, rendered-small[-tls] or rendered-large[-tls]")
	image := fs.String("image", "", "the proxy image")
	origin := fs.String("origin", "", "the origin's host name, which the allow-list names")
	client := fs.String("client", "", "the benchmark client's range")
	ports := fs.String("ports", "", "the origin's ports, comma-separated, which CONNECT and http:// may reach")
	dir := fs.String("dir", "", "where create writes client-auth and ca.pem")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if (op != "create" && op != "delete") || fs.NArg() != 0 || *kubeconfig == "" || *ns == "" || *subject == "" {
		return fmt.Errorf("%w: dataplane-pod create|delete -kubeconfig FILE -namespace NS -subject S", errUsage)
	}
	cs, err := clientset(*kubeconfig)
	if err != nil {
		return err
	}
	// A pod that never becomes ready, or never goes, fails the run instead of holding it.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	name := podProxyObjectName(*subject)
	if op == "delete" {
		return deletePodProxy(ctx, cs, *ns, name)
	}
	if *image == "" || *origin == "" || *client == "" || *ports == "" || *dir == "" {
		return fmt.Errorf("%w: dataplane-pod create takes -image, -origin, -client, -ports and -dir", errUsage)
	}
	clientRange, err := netip.ParsePrefix(*client)
	if err != nil {
		return fmt.Errorf("-client: %w", err)
	}
	allowedPorts, err := parsePorts(*ports)
	if err != nil {
		return err
	}
	auth := ""
	var ca []byte
	switch {
	case *subject == subjectPlainSquid:
		err = createPlainPod(ctx, cs, *ns, name, *image)
	case strings.HasPrefix(*subject, "rendered-"):
		size, useTLS := strings.CutSuffix(strings.TrimPrefix(*subject, "rendered-"), "-tls")
		var s proxyconf.Settings
		if s, err = renderedSettings(size, *origin, clientRange, proxyconf.DefaultPort); err != nil {
			return err
		}
		// The origin listens beside the cluster's own test origin, which has port 80: on ports of its own, which
		// the allow-list and every rule set (each has its ports) allow.
		s.AllowedPorts = allowedPorts
		for i := range s.RuleSets {
			s.RuleSets[i].Ports = allowedPorts
		}
		if auth, ca, err = podLoginAndTLS(&s, size, useTLS); err != nil {
			return err
		}
		err = createRenderedPod(ctx, *kubeconfig, *ns, name, *image, s)
	default:
		return fmt.Errorf("%w: no pod subject %q", errUsage, *subject)
	}
	if err != nil {
		return err
	}
	files := map[string][]byte{"client-auth": []byte(auth)}
	if ca != nil {
		files["ca.pem"] = ca
	}
	if err := writeFiles(*dir, files, 0o600); err != nil {
		return err
	}
	pod, err := readyPod(ctx, cs, *ns, name)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "ip=%s uid=%s\n", pod.Status.PodIP, pod.UID)
	return err
}

// podProxyObjectName is a subject's name as a Kubernetes object name (no dots, at most 63 characters).
func podProxyObjectName(subject string) string { return "dp-" + subject }

func parsePorts(list string) ([]int, error) {
	var ports []int
	for _, f := range strings.Split(list, ",") {
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("-ports: %q is not a port", f)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// podLoginAndTLS adds to s what dataplane-render adds on the machine: the large size's login, with a password
// made for this run, and TLS on the proxy port, with a certificate for podProxyName. It returns the
// Proxy-Authorization value ("" without a login) and the CA to trust (nil without TLS).
func podLoginAndTLS(s *proxyconf.Settings, size string, useTLS bool) (auth string, caPEM []byte, err error) {
	if size == "large" || size == variantNoRules {
		password, err := randomText(16)
		if err != nil {
			return "", nil, err
		}
		s.Users = []proxyconf.BasicAuth{{Username: benchUser, Password: password}}
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(benchUser+":"+password))
	}
	if useTLS {
		ca, cert, key, err := proxyCertificate(netip.Addr{}, podProxyName)
		if err != nil {
			return "", nil, err
		}
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: string(cert), PrivateKeyPEM: string(key)}
		caPEM = ca
	}
	return auth, caPEM, nil
}

// createRenderedPod makes the proxy with the kubernetes backend, as egress_proxy does (without its
// NetworkPolicy: the client is in the node's namespace, which a policy for pods' ranges does not name), and
// returns once it is Available.
func createRenderedPod(ctx context.Context, kubeconfig, ns, name, image string, s proxyconf.Settings) error {
	b, err := kbackend.New(kbackend.Config{Clusters: map[string]kbackend.ClusterConfig{"bench": {ConfigPath: kubeconfig}}, Image: image})
	if err != nil {
		return err
	}
	_, err = b.Create(ctx, backend.Spec{
		Name: name, UID: "bench-" + name, Owner: "bench",
		Placement: backend.Placement{Backend: kbackend.Kind, Target: "bench", Scope: ns, Options: &kbackend.Options{NetworkPolicy: false}},
		Proxy:     s,
	})
	return err
}

// plainSquidConf is what a hand-written module ships, as on the machine (scripts/bench-dataplane.sh), with the
// rendered configuration's lines that fit Squid to the pod (where its logs, pid file and core dumps go on a
// read-only root file system) so that both log to the same places.
func plainSquidConf(rendered string) string {
	var b strings.Builder
	b.WriteString("# What a hand-written module ships: forward everything, keep nothing, log every request.\n")
	b.WriteString("http_port 3128\nhttp_access allow all\ncache deny all\nshutdown_lifetime 1 seconds\n")
	for _, line := range strings.Split(rendered, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "access_log":
			// Its destination, in Squid's own format: the rendered one's is a logformat of its own.
			b.WriteString("access_log " + f[1] + "\n")
		case "cache_log", "pid_filename", "coredump_dir", "logfile_daemon":
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// createPlainPod makes the backend's Deployment and ConfigMap with plain Squid's squid.conf, and a readiness
// probe on the proxy port (plain Squid has no health port), and waits until it is Available.
func createPlainPod(ctx context.Context, cs kubernetes.Interface, ns, name, image string) error {
	cm, d, _, err := kbackend.BenchObjects(name, ns, image)
	if err != nil {
		return err
	}
	cm.Data = map[string]string{guest.ConfigKey: plainSquidConf(cm.Data[guest.ConfigKey])}
	c := &d.Spec.Template.Spec.Containers[0]
	c.ReadinessProbe.ProbeHandler = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(proxyconf.DefaultPort)}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		got, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if kbackend.DeploymentReady(got) {
			return nil
		}
		if err := crashed(ctx, cs, ns, got); err != nil {
			return err
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("plain Squid's Deployment %s did not become ready: %w", name, err)
		}
	}
}

// crashed says why, when a pod of d has exited: plain Squid that cannot start would otherwise be waited on
// until the deadline, its reason lost with the namespace.
func crashed(ctx context.Context, cs kubernetes.Interface, ns string, d *appsv1.Deployment) error {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if t := c.LastTerminationState.Terminated; t != nil {
				return fmt.Errorf("pod %s: %s exited (%d): %s", p.Name, c.Name, t.ExitCode, t.Message)
			}
		}
	}
	return nil
}

// readyPod is the one ready pod of the Deployment name.
func readyPod(ctx context.Context, cs kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podIsReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) != 1 {
		return nil, fmt.Errorf("%s: %d ready pods, want 1", name, len(ready))
	}
	return ready[0], nil
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deletePodProxy removes a subject's objects (the backend's labels name them all) and its pods at once,
// without their grace period: the next subject is measured on a node where the last one no longer runs.
// It returns once no pod of it is left.
func deletePodProxy(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	background := metav1.DeletePropagationBackground
	if err := cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		return err
	}
	for _, del := range []func() error{
		func() error { return cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return cs.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return waitNoPods(ctx, cs, ns, sel)
}

func waitNoPods(ctx context.Context, cs kubernetes.Interface, ns string, sel labels.Selector) error {
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		for _, p := range pods.Items {
			err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("pods of %s still there: %w", sel, err)
		}
	}
}

// pause polls the cluster's state, which has no event this command could wait on more simply than a watch.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
