package kvm

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
)

// checkMetricsOnVM is TestLiveReconfigure's metrics part (issue 40), on the booted proxy it made, all in place
// through the guest agent: metrics turned on for a range without the test's one client address, whose
// connections to both metrics ports fail while mtail and the exporter run in the guest; then the range widened
// to the client and mtail moved to another port, and Debian's Prometheus, run in the test namespace, scrapes
// mtail and the exporter there; allowed, denied and (with a rule set in report mode) would-deny requests move
// egress_proxy_requests_total by exactly their number. It returns the settings it left (metrics on, no rule
// set), for the caller's next Reconfigure, which turns them off.
func checkMetricsOnVM(t *testing.T, b *Backend, spec backend.Spec, inst backend.Instance, proxy, allowed, denied string,
	reconfigure func(what string, s proxyconf.Settings) backend.Instance,
) proxyconf.Settings {
	t.Helper()
	host := inst.InternalAddress
	// Whether the test's client (the namespace's side of the network) opens a TCP connection to port.
	connects := func(port int) bool {
		out, _ := inNetns(t, "bash", "-c", `exec 3<>"/dev/tcp/$0/$1" && echo open`, host, strconv.Itoa(port))
		return strings.TrimSpace(out) == "open"
	}
	// Whether both metrics programs listen in the guest (a unit is active a moment before its program
	// listens, under emulation a second or more): what the client's connections are then checked against.
	listening := func(ports ...int) bool {
		for _, p := range ports {
			out := outputInGuestAnyStatus(t, b, spec.Name, "/bin/ss", "-Hltn", "sport = :"+strconv.Itoa(p))
			if strings.TrimSpace(out) == "" {
				return false
			}
		}
		return true
	}
	unitsActive := func() bool {
		out := outputInGuestAnyStatus(t, b, spec.Name, append([]string{"/bin/systemctl", "is-active"}, vmguest.MetricsUnits...)...)
		return strings.Count(out, "active\n") == len(vmguest.MetricsUnits) && !strings.Contains(out, "inactive")
	}

	// On, for a range the client is not in: both programs run, and neither port admits the client.
	on := spec.Proxy
	on.DeniedDestinations = []string{"blocked.test"}
	on.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"203.0.113.0/24"}}
	got := reconfigure("metrics on, for another range", on)
	if got.Proxy == nil || got.Proxy.Metrics == nil || got.Proxy.Metrics.AllowedClientCIDRs[0] != "203.0.113.0/24" {
		t.Errorf("Get after turning metrics on reads %+v", got.Proxy)
	}
	port, squidPort := on.Metrics.Ports()
	waitFor(t, time.Minute, "mtail and the Squid exporter to run in the guest", unitsActive)
	waitFor(t, time.Minute, "mtail and the Squid exporter to listen in the guest", func() bool { return listening(port, squidPort) })
	for _, p := range []int{port, squidPort} {
		if connects(p) {
			t.Errorf("a client outside the metrics ranges connected to metrics port %d", p)
		}
	}
	if !connects(inst.Port) {
		t.Errorf("the proxy's port %d refuses the client once metrics are on", inst.Port)
	}

	// Widened to the client, and mtail moved: the same proxy, now scraped.
	on.Metrics = &proxyconf.MetricsSettings{Port: 9100, AllowedClientCIDRs: []string{liveGateway + "/32"}}
	got = reconfigure("metrics widened to the client, mtail moved", on)
	if got.Proxy == nil || got.Proxy.Metrics == nil || got.Proxy.Metrics.Port != 9100 {
		t.Errorf("Get after moving mtail reads %+v", got.Proxy)
	}
	port, squidPort = on.Metrics.Ports()
	waitFor(t, time.Minute, "mtail and the Squid exporter to run in the guest again", unitsActive)
	waitFor(t, time.Minute, "mtail and the Squid exporter to listen on their new ports", func() bool { return listening(port, squidPort) })
	for _, p := range []int{port, squidPort} {
		if !connects(p) {
			t.Errorf("the metrics client cannot connect to metrics port %d", p)
		}
	}
	prom := metricstest.PrometheusInNetns(t, liveNetns(), nil,
		metricstest.Target{Job: "mtail", Address: net.JoinHostPort(host, strconv.Itoa(port))},
		metricstest.Target{Job: "squid", Address: net.JoinHostPort(host, strconv.Itoa(squidPort))})
	prom.WaitFor(t, 2*time.Minute, "scrape mtail and the exporter", func() (bool, string) {
		up, err := metricstest.TryQuery(prom.URL, "up", "instance")
		return err == nil && up[metricstest.Series("up", "job", "mtail")] == 1 && up[metricstest.Series("up", "job", "squid")] == 1,
			fmt.Sprintf("up %v, %v", up, err)
	})
	prom.WaitFor(t, time.Minute, "the exporter to read Squid", func() (bool, string) {
		s, err := metricstest.TryQuery(prom.URL, "squid_up", "instance", "job", "host")
		return err == nil && s["squid_up"] == 1, fmt.Sprintf("squid_up %v, %v", s, err)
	})

	// The in-flight gauges: mtail exports a gauge only once a line set it, so their series show that the
	// guest's egress-proxy-active-requests unit read Squid's cache manager and reached mtail (every 10 s).
	prom.WaitFor(t, time.Minute, "scrape the in-flight gauges", func() (bool, string) {
		s, err := metricstest.TryQuery(prom.URL, "{__name__=~\"egress_proxy_(active|client_active)_.*\"}", "instance", "job", "prog")
		for _, name := range []string{metrics.ActiveRequests, metrics.ActiveTunnels, metrics.ClientActiveRequestsMax} {
			if _, ok := s[name]; !ok || err != nil {
				return false, fmt.Sprintf("%s missing from %v (%v)", name, s, err)
			}
		}
		return true, ""
	})

	// On a failure, what the guest logged and counted, for the report.
	defer func() {
		if t.Failed() {
			s, err := metricstest.TryQuery(prom.URL, metrics.RequestsTotal, "instance", "job", "prog")
			t.Logf("Prometheus holds %v (%v)", s, err)
			t.Logf("the access log's last lines:\n%s", outputInGuestAnyStatus(t, b, spec.Name, "/usr/bin/tail", "-n", "12", accessLogPath))
			t.Logf("mtail:\n%s", outputInGuestAnyStatus(t, b, spec.Name, "/bin/journalctl", "--no-pager", "-n", "20", "-u", vmguest.MtailUnit))
		}
	}()
	const none = "-"
	series := func(decision, reason, ruleSet string) string {
		return metricstest.Series(metrics.RequestsTotal, "decision", decision, "reason", reason, "rule_set", ruleSet)
	}
	query := func() metricstest.Samples {
		t.Helper()
		s, err := metricstest.TryQuery(prom.URL, metrics.RequestsTotal, "instance", "job", "prog")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	send := func(url, status string, times int) {
		t.Helper()
		for range times {
			if got := viaProxy(t, proxy, "", url); got != status {
				t.Fatalf("%s through the proxy: %s, want %s", url, got, status)
			}
		}
	}
	// waitMarker waits until Prometheus holds want for the marker's series and returns what it holds. mtail
	// reads the log in order and Prometheus takes all its series in one scrape: once the marker's count is
	// there, every line written before it is counted.
	waitMarker := func(what, marker string, want float64) metricstest.Samples {
		t.Helper()
		var s metricstest.Samples
		prom.WaitFor(t, time.Minute, what, func() (bool, string) {
			s = query()
			return s[marker] >= want, fmt.Sprintf("%s at %v", marker, s[marker])
		})
		if s[marker] != want {
			t.Fatalf("%s: %s at %v, want %v", what, marker, s[marker], want)
		}
		return s
	}
	blocked := strings.Replace(allowed, "allowed.test", "blocked.test", 1)
	marker := series("deny", proxyconf.ReasonDeniedDestination, none)
	// mtail follows the log from where it was when it started: markers sent until one counts. Those sent before
	// mtail read the file never count, and Prometheus may be a scrape behind the last ones, so their number is
	// not the baseline's.
	sent := 0
	prom.WaitFor(t, time.Minute, "mtail to count a first request", func() (bool, string) {
		send(blocked, "403", 1)
		sent++
		s := query()
		return s[marker] >= 1, fmt.Sprintf("%s at %v", marker, s[marker])
	})
	// The baseline behind one allowed request, the first of its series since mtail started on its new port (no
	// allowed request went through since, and a restarted mtail counts from zero): once Prometheus holds it at
	// exactly 1, the same scrape holds every marker before it.
	allowSeries := series("allow", none, none)
	send(allowed, "200", 1)
	base := waitMarker("the baseline's allowed request", allowSeries, 1)
	if base[marker] < 1 || base[marker] > float64(sent) {
		t.Fatalf("%s at %v after %d such requests", marker, base[marker], sent)
	}
	moves := map[string]int{allowSeries: 3, series("deny", proxyconf.ReasonDestinationNotAllowed, none): 2}
	send(allowed, "200", 3)
	send(denied, "403", 2)
	send(blocked, "403", 1)
	after := waitMarker("allowed and denied requests counted", marker, base[marker]+1)
	checkMoves(t, "allowed and denied", base, after, moves, marker)

	// A rule set in report mode for the client: what it would refuse is forwarded and counted as would_deny.
	reported := on
	reported.RuleSets = []proxyconf.RuleSet{{Name: "reported", Mode: proxyconf.RuleSetReport,
		Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{liveGateway + "/32"}}, Destinations: []string{"allowed.test"},
		Ports: on.AllowedPorts}} // the upstream's port among them: what it would refuse is the destination
	reconfigure("a rule set in report mode", reported)
	if !unitsActive() {
		t.Errorf("a rule change stopped the metrics programs")
	}
	reportMarker := series("allow", none, "reported")
	// The baseline behind one more first marker, whose count is known: the lines Reconfigure's own health
	// check wrote are counted by then.
	send(blocked, "403", 1)
	base = waitMarker("the report phase's baseline", marker, after[marker]+1)
	send(denied, "200", 4)
	send(allowed, "200", 1)
	after = waitMarker("would-deny requests counted", reportMarker, base[reportMarker]+1)
	checkMoves(t, "would-deny", base, after, map[string]int{series("would_deny", proxyconf.ReasonDestinationNotAllowed, "reported"): 4}, reportMarker)
	return on
}

// checkMetricsOff: metrics turned off in place leave neither program running nor either port open.
func checkMetricsOff(t *testing.T, b *Backend, spec backend.Spec, inst backend.Instance, was *proxyconf.MetricsSettings) {
	t.Helper()
	out := outputInGuestAnyStatus(t, b, spec.Name, append([]string{"/bin/systemctl", "is-active"}, vmguest.MetricsUnits...)...)
	if strings.Count(out, "inactive\n") != len(vmguest.MetricsUnits) {
		t.Errorf("with metrics off the metrics units are %q, want inactive", out)
	}
	port, squidPort := was.Ports()
	for _, p := range []int{port, squidPort} {
		o, _ := inNetns(t, "bash", "-c", `exec 3<>"/dev/tcp/$0/$1" && echo open`, inst.InternalAddress, strconv.Itoa(p))
		if strings.TrimSpace(o) == "open" {
			t.Errorf("with metrics off port %d is open", p)
		}
	}
}

// checkMoves fails unless each series moved from base to after by exactly its count, the marker by one, and
// every other series not at all.
func checkMoves(t *testing.T, what string, base, after metricstest.Samples, moves map[string]int, marker string) {
	t.Helper()
	want := map[string]float64{marker: 1}
	for s, n := range moves {
		want[s] = float64(n)
	}
	for s := range after {
		if _, ok := want[s]; !ok {
			want[s] = 0
		}
	}
	for s, n := range want {
		if got := after[s] - base[s]; got != n {
			t.Errorf("%s: %s moved by %v, want %v", what, s, got, n)
		}
	}
}

// outputInGuestAnyStatus is outputInGuest whatever the exit status, for a program whose exit status is part
// of its answer (systemctl is-active).
func outputInGuestAnyStatus(t *testing.T, b *Backend, name string, argv ...string) string {
	t.Helper()
	return execInGuest(t, b, lookupDomain(t, b, name), argv...).stdout
}
