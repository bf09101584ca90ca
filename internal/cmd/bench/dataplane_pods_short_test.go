package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "..", "..", "scripts", "bench-dataplane-k8s.sh"), "squid-plain", "rendered-large-tls")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "EGRESS_K8S_NETNS="+netns, "EGRESS_K8S_STATE="+filepath.Dir(kubeconfig), "BENCH_SECONDS=1", "BENCH_HELD=200",
		"BENCH_BIN="+self, asCommand+"=1", "OUT="+out)
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench-dataplane-k8s.sh: %v\n%s", err, output)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| squid-plain |", "| rendered-large-tls |"} {
		if !strings.Contains(string(table), s) {
			t.Errorf("the table has no row %s:\n%s", s, table)
		}
	}
	t.Logf("%s", output)
}
