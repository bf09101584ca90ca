package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDataplanePodsShortRun runs scripts/bench-dataplane-k8s.sh on the test cluster for a second a
// measurement, over plain Squid and the rendered large configuration with TLS (the kubernetes backend's
// Create, its Secret with the login and the key, the route and the pinning through the pod's cgroup): a proof
// that the pods leg still measures through real pods without an error or a refusal (bench dataplane-check),
// not a benchmark. It holds 200 tunnels, not 1,000: enough to spread them over the client addresses.
//
// It needs the cluster of scripts/k8s-env.sh (EGRESS_K8S_KUBECONFIG, as the backend's live tests, and
// EGRESS_K8S_NETNS, its network namespace; the kubeconfig is in its state directory) and root.
func TestDataplanePodsShortRun(t *testing.T) {
	kubeconfig, netns := os.Getenv("EGRESS_K8S_KUBECONFIG"), os.Getenv("EGRESS_K8S_NETNS")
	if kubeconfig == "" || netns == "" {
		t.Skip("EGRESS_K8S_KUBECONFIG and EGRESS_K8S_NETNS are not both set: start the test cluster (scripts/k8s-env.sh start) and name its kubeconfig and network namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("the pods leg runs its client in the cluster's network namespace: run as root")
	}
	runDataplaneScript(t, 5*time.Minute, "bench-dataplane-k8s.sh", []string{"squid-plain", "rendered-large-tls"},
		[]string{"KUBECONFIG=" + kubeconfig, "EGRESS_K8S_NETNS=" + netns, "EGRESS_K8S_STATE=" + filepath.Dir(kubeconfig), "BENCH_SECONDS=1", "BENCH_HELD=200"},
		"| squid-plain |", "| rendered-large-tls |")
}
