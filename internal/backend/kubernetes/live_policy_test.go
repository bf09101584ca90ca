package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// The names the policy test asks for: every name under egress-k8s.test resolves to the cluster's origin, so
// each is served and only the policy tells them apart.
const (
	policyAllowed  = "allowed.egress-k8s.test"  // the rule sets' destination
	policyFallback = "fallback.egress-k8s.test" // the fallback's (allowed_destinations)
	policyDenied   = "denied.egress-k8s.test"   // on every list and on the deny list
)

// policyRequest sends one GET through the proxy at $0:$1 for http://$2/ from a client pod, on a connection of
// its own, and prints the status line.
const policyRequest = `timeout 10 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$2" >&3 && head -n 1 <&3' "$0" "$1" "$2"`

// TestPolicyLive is issue 39's decision table in a Kubernetes pod: a proxy with an enforced rule set, a
// reported one, a deny list and a fallback, asked by three client pods (one in each rule set's source range,
// one in neither) for the rule sets' destination, the fallback's and a denied one, through the proxy's
// Service as a workload would. Each request's status and its access log line's ruleset, decision and reason
// (the pod's stdout) must be the table's: the pod runs the same squid.conf as the guest-root test, and this
// shows the pod's network keeps the client addresses the rule sets match by (no masquerading on the way to the
// Service) and that the decision fields reach the pod's log.
func TestPolicyLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cluster, cs, b := liveCluster(t)
	ns := cluster.Namespace(t, "policy")
	// The cluster assigns the pods' addresses: the rule sets are written once they are known.
	clients := map[string]string{}
	for _, pod := range []string{"enforced", "reported", "unlisted"} {
		clients[pod] = cluster.IdlePod(t, ns, pod, DefaultImage)
	}
	spec := backend.Spec{
		Name: "policy", UID: "policy-" + strconv.FormatInt(time.Now().UnixNano(), 36), Owner: "policy-test",
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: ns, Options: &Options{}},
		Proxy: proxyconf.Settings{
			Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedPrivateCIDRs: []string{liveOriginCIDR},
			AllowedDestinations: []string{policyFallback, policyDenied},
			DeniedDestinations:  []string{policyDenied},
			RuleSets: []proxyconf.RuleSet{
				{Name: "enforced", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{clients["enforced"] + "/32"}},
					Destinations: []string{policyAllowed, policyDenied}},
				{Name: "reported", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{clients["reported"] + "/32"}},
					Destinations: []string{policyAllowed, policyDenied}, Mode: proxyconf.RuleSetReport},
			},
		},
	}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Delete(ctx, inst.ID); err != nil {
			t.Errorf("deleting %s: %v", inst.ID, err)
		}
	})
	svc, err := cs.CoreV1().Services(ns).Get(ctx, spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The Service forwards once the proxy pod is Ready and the node's rules know it: until then a connection
	// is refused. A name on no list, so that its lines are not the table's.
	err = backend.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		res, err := cluster.Exec(ctx, ns, "unlisted", "bash", "-c", policyRequest, svc.Spec.ClusterIP, strconv.Itoa(spec.Proxy.Port), "probe.egress-k8s.test")
		return err == nil && strings.HasPrefix(res.Stdout, "HTTP/"), err
	})
	if err != nil {
		t.Fatalf("waiting for the proxy to answer through its Service: %v", err)
	}

	const none = "-"
	table := []struct {
		client, host              string
		want                      string // the status line's code
		ruleSet, decision, reason string
	}{
		{"enforced", policyAllowed, "200", "enforced", "allow", none},
		{"enforced", policyFallback, "403", "enforced", "deny", proxyconf.ReasonDestinationNotAllowed},
		{"enforced", policyDenied, "403", none, "deny", proxyconf.ReasonDeniedDestination},
		{"reported", policyAllowed, "200", "reported", "allow", none},
		{"reported", policyFallback, "200", "reported", "would_deny", proxyconf.ReasonDestinationNotAllowed},
		{"reported", policyDenied, "403", none, "deny", proxyconf.ReasonDeniedDestination},
		{"unlisted", policyFallback, "200", none, "allow", none},
		{"unlisted", policyAllowed, "403", none, "deny", proxyconf.ReasonDestinationNotAllowed},
		{"unlisted", policyDenied, "403", none, "deny", proxyconf.ReasonDeniedDestination},
	}
	for _, tc := range table {
		res, err := cluster.Exec(ctx, ns, tc.client, "bash", "-c", policyRequest, svc.Spec.ClusterIP, strconv.Itoa(spec.Proxy.Port), tc.host)
		if err != nil {
			t.Fatalf("%s asking for %s: %v", tc.client, tc.host, err)
		}
		if fields := strings.Fields(res.Stdout); len(fields) < 2 || fields[1] != tc.want {
			t.Errorf("%s asking for %s: %q%s, want status %s", tc.client, tc.host, strings.TrimSpace(res.Stdout), res.Stderr, tc.want)
		}
	}

	// The access log: one line per request, found by its client and host (the log is also the readiness
	// probes' and Squid's own messages). Squid writes a line once it has answered, so the last may lag the
	// answer a little.
	var log string
	missing := func() []string {
		var out []string
		for _, tc := range table {
			line, ok := policyLogLine(log, clients[tc.client], tc.host)
			if !ok {
				out = append(out, fmt.Sprintf("%s asking for %s: no access log line", tc.client, tc.host))
				continue
			}
			f := logKeyValues(line)
			if f["ruleset"] != tc.ruleSet || f["decision"] != tc.decision || f["reason"] != tc.reason {
				out = append(out, fmt.Sprintf("%s asking for %s: ruleset=%s decision=%s reason=%s, want ruleset=%s decision=%s reason=%s (%s)",
					tc.client, tc.host, f["ruleset"], f["decision"], f["reason"], tc.ruleSet, tc.decision, tc.reason, line))
			}
		}
		return out
	}
	logCtx, cancelLog := context.WithTimeout(ctx, time.Minute)
	defer cancelLog()
	err = backend.Poll(logCtx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		log = cluster.PodLog(ctx, ns, backend.LabelUID, spec.UID)
		for _, tc := range table {
			if _, ok := policyLogLine(log, clients[tc.client], tc.host); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Logf("waiting for every request's access log line: %v", err)
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("the proxy pod's access log:\n%s\n\nits lines:\n%s", strings.Join(m, "\n"), accessLines(log))
	}
}

// policyLogLine returns the access log line of the request from client for host, and whether there is one.
func policyLogLine(log, client, host string) (string, bool) {
	for _, line := range strings.Split(log, "\n") {
		if f := logKeyValues(line); f["client"] == client && f["host"] == host {
			return line, true
		}
	}
	return "", false
}

// logKeyValues are the key=value fields of an access log line.
func logKeyValues(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// accessLines are the access log's lines of a pod's log, without Squid's own messages (its stderr, in the same
// log), for a failure's message.
func accessLines(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if _, ok := logKeyValues(line)["client"]; ok {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
