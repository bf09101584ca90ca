package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// liveNodeOnPods is the node's address on the pods' bridge (the bridge CNI's gateway in scripts/k8s-env.sh):
// the source of what a process of the cluster's network namespace, such as the test's Prometheus, sends to a
// pod. It is in the metrics ranges as a real Prometheus's address would be, though the test cluster's policy
// controller lets the node's own traffic reach its pods whatever the policy says (the kubelet's probes need
// it; the scrape passed with the node left out): the refusal is shown from a pod.
const liveNodeOnPods = "10.244.0.1"

// TestMetricsLive is issue 40's check on a cluster: a proxy made with metrics runs mtail and the Squid exporter
// beside Squid, and Debian's Prometheus, run by the test in the cluster's network namespace, scrapes mtail
// through the Service (where metrics_url points) and the exporter on the pod's named port (where a PodMonitor
// points). Allowed, denied and would-deny requests sent through the proxy by client pods move
// egress_proxy_requests_total{decision=...} in Prometheus by exactly their number, and nothing else; Squid's
// own request counter moves by at least as many. The NetworkPolicy admits the metrics ports from the metrics
// ranges alone: a client pod outside them, which the proxy port admits, cannot open a connection to them, and
// one inside them can.
func TestMetricsLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cluster, cs, b := liveCluster(t)
	netns := os.Getenv("EGRESS_K8S_NETNS")
	if netns == "" {
		t.Skip("EGRESS_K8S_NETNS is not set: set it to the cluster's network namespace (scripts/k8s-env.sh's), where the test runs Prometheus")
	}
	ns := cluster.Namespace(t, "metrics")
	// scraper may read the metrics; reported is a proxy client in a rule set in report mode, and not a metrics
	// client.
	clients := map[string]string{}
	for _, pod := range []string{"scraper", "reported"} {
		clients[pod] = cluster.IdlePod(t, ns, pod, DefaultImage)
	}
	spec := backend.Spec{
		Name: "metrics", UID: "metrics-" + strconv.FormatInt(time.Now().UnixNano(), 36), Owner: "metrics-test",
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: ns, Options: &Options{NetworkPolicy: true}},
		Proxy: proxyconf.Settings{
			Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedPrivateCIDRs: []string{liveOriginCIDR},
			// The denied name is on both lists, so its refusal is the deny list's (as in TestPolicyLive).
			AllowedDestinations: []string{policyFallback, policyDenied},
			DeniedDestinations:  []string{policyDenied},
			RuleSets: []proxyconf.RuleSet{{
				Name: "reported", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{clients["reported"] + "/32"}},
				Destinations: []string{policyAllowed}, Mode: proxyconf.RuleSetReport,
			}},
			LogFormat: proxyconf.LogFormatJSON,
			Metrics:   &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{clients["scraper"] + "/32", liveNodeOnPods + "/32"}},
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
	if inst.Proxy == nil || inst.Proxy.Metrics == nil || inst.Proxy.Metrics.AllowedClientCIDRs[0] != clients["scraper"]+"/32" {
		t.Fatalf("Create read back metrics %+v", inst.Proxy)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, podIP, err := cluster.ReadyPod(ctx, ns, backend.LabelUID, spec.UID)
	if err != nil {
		t.Fatal(err)
	}
	port, squidPort := spec.Proxy.Metrics.Ports()

	prom := metricstest.PrometheusInNetns(t, netns, nil,
		metricstest.Target{Job: "mtail", Address: fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, port)},
		metricstest.Target{Job: "squid", Address: fmt.Sprintf("%s:%d", podIP, squidPort)})
	prom.WaitFor(t, 60*time.Second, "scrape mtail and the exporter", func() (bool, string) {
		up, err := metricstest.TryQuery(prom.URL, "up", "instance")
		return err == nil && up[metricstest.Series("up", "job", "mtail")] == 1 && up[metricstest.Series("up", "job", "squid")] == 1,
			fmt.Sprintf("up %v, %v", up, err)
	})

	// One request through the proxy's Service from a client pod, and its status code.
	send := func(client, host string) string {
		t.Helper()
		res, err := cluster.Exec(ctx, ns, client, "bash", "-c", policyRequest, svc.Spec.ClusterIP, strconv.Itoa(spec.Proxy.Port), host)
		if err != nil {
			t.Fatalf("%s asking for %s: %v", client, host, err)
		}
		if f := strings.Fields(res.Stdout); len(f) >= 2 {
			return f[1]
		}
		return strings.TrimSpace(res.Stdout + res.Stderr)
	}
	const none = "-"
	series := func(decision, reason, ruleSet string) string {
		return metricstest.Series(metrics.RequestsTotal, "decision", decision, "reason", reason, "rule_set", ruleSet)
	}
	type exchange struct {
		client, host, status string
		series               string
		times                int
	}
	exchanges := []exchange{
		{"scraper", policyFallback, "200", series("allow", none, none), 3},
		{"scraper", policyAllowed, "403", series("deny", proxyconf.ReasonDestinationNotAllowed, none), 2},
		{"reported", policyFallback, "200", series("would_deny", proxyconf.ReasonDestinationNotAllowed, "reported"), 4},
	}
	// Two markers, requests of kinds of their own. Squid logs each request once it has answered it, mtail
	// reads the lines from its one UDP socket in the order Squid sent them, and Prometheus takes all of mtail's
	// series in one scrape: once Prometheus holds a marker's count, it holds every line sent before it.
	// mtail counts only what reaches its port once it listens, so the first marker is sent until one counts.
	first := exchange{"scraper", policyDenied, "403", series("deny", proxyconf.ReasonDeniedDestination, none), 1}
	marker := exchange{"reported", policyAllowed, "200", series("allow", none, "reported"), 1}
	query := func() metricstest.Samples {
		s, err := metricstest.TryQuery(prom.URL, metrics.RequestsTotal, "instance", "job", "prog")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exchangeOnce := func(e exchange) {
		t.Helper()
		if got := send(e.client, e.host); got != e.status {
			t.Fatalf("%s asking for %s: %s, want %s", e.client, e.host, got, e.status)
		}
	}
	markerAt := func(what string, want float64) metricstest.Samples {
		t.Helper()
		var s metricstest.Samples
		prom.WaitFor(t, 30*time.Second, what, func() (bool, string) {
			s = query()
			return s[marker.series] >= want, fmt.Sprintf("%s at %v", marker.series, s[marker.series])
		})
		if s[marker.series] != want {
			t.Fatalf("%s: %s at %v, want %v", what, marker.series, s[marker.series], want)
		}
		return s
	}
	prom.WaitFor(t, 60*time.Second, "count a first request", func() (bool, string) {
		exchangeOnce(first)
		return query()[first.series] > 0, "not counted yet"
	})
	// One of each kind, so that every series exists before the counted ones, then the marker: the baseline.
	for _, e := range exchanges {
		exchangeOnce(e)
	}
	exchangeOnce(marker)
	before := markerAt("count the first marker", 1)
	squidBefore := metricstest.Query(t, prom.URL, "squid_client_http_requests_total", "instance", "job")

	counted := 0
	want := metricstest.Samples{marker.series: 1}
	for _, e := range exchanges {
		for range e.times {
			exchangeOnce(e)
		}
		counted += e.times
		want[e.series] += float64(e.times)
	}
	exchangeOnce(marker)
	after := markerAt("count the requests and the second marker", 2)
	delta := metricstest.Delta(before, after)
	for s, w := range want {
		if delta[s] != w {
			t.Errorf("Prometheus: %s moved by %v, want %v", s, delta[s], w)
		}
	}
	for s, d := range delta {
		if _, ok := want[s]; !ok && d != 0 {
			t.Errorf("Prometheus: %s moved by %v, want no change", s, d)
		}
	}
	prom.WaitFor(t, 30*time.Second, "scrape Squid's counter after the requests", func() (bool, string) {
		s, err := metricstest.TryQuery(prom.URL, "squid_client_http_requests_total", "instance", "job")
		d := metricstest.Delta(squidBefore, s)["squid_client_http_requests_total"]
		return err == nil && d >= float64(counted+1), fmt.Sprintf("moved by %v, %v", d, err)
	})

	// The in-flight gauges: mtail exports a gauge only once a line set it, so their series in Prometheus show
	// that the pod's third sidecar read Squid's cache manager and reached mtail (every 10 s). Their values
	// here depend on timing (the requests above have ended); internal/metrics counts them exactly.
	prom.WaitFor(t, 45*time.Second, "scrape the in-flight gauges", func() (bool, string) {
		s, err := metricstest.TryQuery(prom.URL, "{__name__=~\"egress_proxy_(active|client_active)_.*\"}", "instance", "job", "prog")
		for _, name := range []string{metrics.ActiveRequests, metrics.ActiveTunnels, metrics.ClientActiveRequestsMax} {
			if _, ok := s[name]; !ok || err != nil {
				return false, fmt.Sprintf("%s missing from %v (%v)", name, s, err)
			}
		}
		return true, ""
	})

	// Squid's stdout is still the access log the pod's log shows, beside the sidecars: every would-deny line
	// mtail counted is there too (Squid writes a line to both logs at once).
	var wouldDeny int
	for _, line := range strings.Split(cluster.PodLog(ctx, ns, backend.LabelUID, spec.UID), "\n") {
		var l struct {
			Decision string `json:"decision"`
			RuleSet  string `json:"rule_set"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Decision == "would_deny" && l.RuleSet == "reported" {
			wouldDeny++
		}
	}
	if want := int(after[exchanges[2].series]); wouldDeny != want {
		t.Errorf("the proxy pod's log has %d would_deny lines of the rule set, mtail counted %d", wouldDeny, want)
	}

	probeMetricsPolicy(ctx, t, cluster, ns, podIP, spec.Proxy.Port, port, squidPort)
}

// probeMetricsPolicy: the metrics ports take connections from the scraper pod, inside the metrics ranges, and
// none from the reported pod, outside them, which the proxy port admits. The policy controller applies a
// policy a moment after it is stored: the probes repeat until each gives what it must.
func probeMetricsPolicy(ctx context.Context, t *testing.T, cluster *k8stest.Cluster, ns, podIP string, proxyPort, port, squidPort int) {
	t.Helper()
	probes := []struct {
		from string
		port int
		want string
	}{
		{"scraper", port, "connected"},
		{"scraper", squidPort, "connected"},
		{"reported", proxyPort, "connected"},
		{"reported", port, "refused"},
		{"reported", squidPort, "refused"},
	}
	// A minute is ample for the policy controller on a loaded machine; a policy that is not enforced never
	// gives the refusals.
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var lastRound []string
	err := backend.Poll(pollCtx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		var failed []string
		for _, p := range probes {
			res, err := cluster.Exec(ctx, ns, p.from, "timeout", "5", "bash", "-c", `exec 3<>"/dev/tcp/$0/$1" && echo connected`, podIP, strconv.Itoa(p.port))
			if err != nil {
				return false, err
			}
			got := strings.TrimSpace(res.Stdout)
			if res.Code != 0 {
				got = "refused"
			}
			if got != p.want {
				failed = append(failed, fmt.Sprintf("from %s to %s:%d: %s, want %s", p.from, podIP, p.port, got, p.want))
			}
		}
		lastRound = failed
		return len(failed) == 0, nil
	})
	if err != nil {
		t.Errorf("the NetworkPolicy on the metrics ports: %v; the last whole round of probes:\n%s", err, strings.Join(lastRound, "\n"))
	}
}
