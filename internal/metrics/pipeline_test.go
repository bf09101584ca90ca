package metrics

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// pipeline is a real Squid on loopback, with the mtail that reads its JSON access log, the squid exporter
// that reads its cache manager, and a Prometheus that scrapes both and evaluates the example alert rules.
type pipeline struct {
	sq                    *squidtest.Squid
	mtail, exporter, prom *metricstest.Process
	up                    squidtest.Upstreams
}

// startPipeline renders s (JSON log, a manager port) and starts every part on free ports of 127.0.0.1. Squid
// writes its access log to a file, or with udp sends it to mtail's UDP port. It returns once mtail reads the
// log and Prometheus has scraped both exporters.
func startPipeline(t *testing.T, s proxyconf.Settings, up squidtest.Upstreams, udp bool) *pipeline {
	t.Helper()
	dir := squidtest.Dir(t)
	accessLog, mtailLog := "stdio:"+filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log")
	if udp {
		accessLog = fmt.Sprintf("udp://127.0.0.1:%d", squidtest.FreePort(t))
		mtailLog = accessLog
	}
	p := &pipeline{up: up}
	var opts proxyconf.RenderOptions
	p.sq, opts = startSquid(t, dir, s, accessLog)

	progs := filepath.Join(t.TempDir(), "progs")
	if err := os.Mkdir(progs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progs, ProgramFile), Program, 0o644); err != nil {
		t.Fatal(err)
	}
	p.mtail = metricstest.Mtail(t, progs, mtailLog)
	// mtail reads the log from where it was when it opened it: health checks until one counts.
	health := squidtest.Client{Proxy: p.sq.Health, From: "127.0.0.1"}
	p.mtail.WaitFor(t, 30*time.Second, "read Squid's log", func() (bool, string) {
		if r := health.Get(t, proxyconf.HealthPath, proxyconf.VisibleHostname); r.Status != 200 {
			t.Fatalf("health check: %d", r.Status)
		}
		s, err := metricstest.TryScrape(p.mtail.URL+"/metrics", "prog")
		return err == nil && s[HealthChecksTotal] > 0, "no health check counted"
	})
	// Health checks sent before mtail opened the log never count, those after it do, perhaps after the check
	// above: a request of its own kind, once counted, says mtail has read every line before it.
	if r := (squidtest.Client{Proxy: p.sq.Proxy, From: "127.0.0.9"}).Get(t, "http://allowed.test/", "allowed.test"); r.Status != 403 {
		t.Fatalf("a client outside the ranges got %d", r.Status)
	}
	sync := metricstest.Series(RequestsTotal, "decision", "deny", "reason", proxyconf.ReasonClientNotAllowed, "rule_set", "-")
	p.mtail.WaitFor(t, 30*time.Second, "read the sync request", func() (bool, string) {
		s, err := metricstest.TryScrape(p.mtail.URL+"/metrics", "prog")
		return err == nil && s[sync] == 1, "not counted"
	})

	p.exporter = metricstest.SquidExporter(t, fmt.Sprintf("127.0.0.1:%d", opts.ManagerPort))
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	p.prom = metricstest.Prometheus(t, []string{rules},
		metricstest.Target{Job: "mtail", Address: strings.TrimPrefix(p.mtail.URL, "http://")},
		metricstest.Target{Job: "squid", Address: strings.TrimPrefix(p.exporter.URL, "http://")})
	p.prom.WaitFor(t, 60*time.Second, "scrape both", func() (bool, string) {
		up, err := metricstest.TryQuery(p.prom.URL, "up", "instance")
		return err == nil && up[metricstest.Series("up", "job", "mtail")] == 1 && up[metricstest.Series("up", "job", "squid")] == 1,
			fmt.Sprintf("up %v, %v", up, err)
	})
	return p
}

// startSquid renders s (JSON log to accessLog, a manager port) into dir and starts Squid on free ports of
// 127.0.0.1, where allowed.test and other.test are 127.0.0.1. It returns the options it rendered with.
func startSquid(t *testing.T, dir string, s proxyconf.Settings, accessLog string) (*squidtest.Squid, proxyconf.RenderOptions) {
	t.Helper()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 allowed.test other.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := proxyconf.RenderOptions{
		ListenAddress:  netip.MustParseAddr("127.0.0.1"),
		HealthPort:     squidtest.FreePort(t),
		ManagerPort:    squidtest.FreePort(t),
		PidFile:        filepath.Join(dir, "squid.pid"),
		AccessLog:      accessLog,
		CacheLog:       filepath.Join(dir, "cache.log"),
		CoredumpDir:    dir,
		HtpasswdPath:   filepath.Join(dir, "passwd"),
		HostsFile:      hosts,
		DNSNameservers: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
	}.WithLoopbackDestinationsForTests()
	s.Port = squidtest.FreePort(t)
	s.LogFormat = proxyconf.LogFormatJSON
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "squid.conf")
	squidtest.WriteSecretFile(t, confPath, conf)
	cmd := exec.Command(squidtest.Path(t), "-N", "-n", squidtest.ServiceName(t), "-f", confPath) //nolint:gosec // the test's own Squid
	return squidtest.Start(t, cmd, fmt.Sprintf("127.0.0.1:%d", s.Port), fmt.Sprintf("127.0.0.1:%d", opts.HealthPort), dir), opts
}

// caughtUp waits until Prometheus holds the number of log lines mtail counted, which must be want, and
// returns mtail's and Prometheus' egress_proxy series then.
func (p *pipeline) caughtUp(t *testing.T, want float64) (fromMtail, fromProm metricstest.Samples) {
	t.Helper()
	p.mtail.WaitFor(t, 30*time.Second, fmt.Sprintf("count %v lines", want), func() (bool, string) {
		s, err := metricstest.TryScrape(p.mtail.URL+"/metrics", "prog")
		fromMtail = s
		return err == nil && s[LogLinesTotal] >= want, fmt.Sprintf("%v lines, %v", s[LogLinesTotal], err)
	})
	if fromMtail[LogLinesTotal] != want {
		t.Fatalf("mtail counted %v lines, want %v", fromMtail[LogLinesTotal], want)
	}
	p.prom.WaitFor(t, 30*time.Second, "scrape mtail's count", func() (bool, string) {
		s, err := metricstest.TryQuery(p.prom.URL, LogLinesTotal, "instance", "job", "prog")
		return err == nil && s[LogLinesTotal] == want, fmt.Sprintf("%v, %v", s, err)
	})
	fromProm = metricstest.Query(t, p.prom.URL, `{__name__=~"egress_proxy_.+"}`, "instance", "job", "prog")
	return fromMtail, fromProm
}

// exchange is one kind of request the test sends, how often, and the series it must move.
type exchange struct {
	from             string
	get, connect     string // a URL to GET, or host:port to CONNECT
	status           int
	decision, reason string
	ruleSet          string
	times            int
}

func (p *pipeline) send(t *testing.T, e exchange) {
	t.Helper()
	c := p.up.Client(p.sq, e.from)
	for range e.times {
		var r squidtest.Result
		if e.connect != "" {
			r = c.Connect(t, e.connect)
		} else {
			r = c.Get(t, e.get, strings.Split(strings.TrimPrefix(e.get, "http://"), "/")[0])
		}
		if r.Status != e.status {
			t.Fatalf("%s%s from %s: status %d, want %d", e.get, e.connect, e.from, r.Status, e.status)
		}
	}
}

// logLine is the part of a JSON access log line the test adds up.
type accessLine struct {
	Host             string `json:"host"`
	Method           string `json:"method"`
	BytesToClient    int64  `json:"bytes_to_client"`
	BytesFromClient  int64  `json:"bytes_from_client"`
	ServerTotalMS    string `json:"server_total_ms"`
	ServerResponseMS string `json:"server_response_ms"`
}

// connectMS is the line's connect time, as the program computes it; false where the line has none.
func (a accessLine) connectMS() (int, bool) {
	total, err1 := strconv.Atoi(a.ServerTotalMS)
	response, err2 := strconv.Atoi(a.ServerResponseMS)
	return total - response, err1 == nil && err2 == nil && total >= response
}

// accessLines are the JSON lines of Squid's access log after the first skip lines.
func (p *pipeline) accessLines(t *testing.T, skip int) []accessLine {
	t.Helper()
	var out []accessLine
	lines := strings.Split(strings.TrimSpace(p.sq.File("access.log")), "\n")
	for _, l := range lines[skip:] {
		var a accessLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("access log line %q: %v", l, err)
		}
		out = append(out, a)
	}
	return out
}

// TestPipelineCountsEachRequest is issue 40's check as far as it goes without a VM: real Squid with a
// rendered config, real mtail and prometheus-squid-exporter, and a real Prometheus scraping both. Allowed,
// denied and would-deny requests (a rule set in report mode) each move their series of
// egress_proxy_requests_total by exactly their number, in mtail and in Prometheus; the bytes add up to what
// the access log says; Squid's own request counter moves by at least as many; and the example rule for
// would-deny fires in Prometheus. Squid writes the log to a file mtail tails, or sends it to mtail over UDP,
// as a container whose stdout is the log would; the bytes are checked against the file.
func TestPipelineCountsEachRequest(t *testing.T) {
	t.Parallel()
	for name, udp := range map[string]bool{"file": false, "udp": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testPipeline(t, udp)
		})
	}
}

func testPipeline(t *testing.T, udp bool) {
	up := squidtest.NewUpstreams(t)
	hp, tp := squidtest.Port(t, up.HTTP), squidtest.Port(t, up.TLS)
	s := proxyconf.Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/29"},
		AllowedDestinations: []string{"allowed.test"},
		AllowedPorts:        []int{hp, tp},
		RuleSets: []proxyconf.RuleSet{{
			Name: "rollout", Mode: proxyconf.RuleSetReport,
			Clients:      proxyconf.RuleSetClients{SourceCIDRs: []string{"127.0.0.3/32"}},
			Destinations: []string{"allowed.test"}, Ports: []int{hp, tp},
		}},
	}
	p := startPipeline(t, s, up, udp)
	const none = "-"
	exchanges := []exchange{
		{from: "127.0.0.1", get: fmt.Sprintf("http://allowed.test:%d/", hp), status: 200, decision: "allow", reason: none, ruleSet: none, times: 3},
		{from: "127.0.0.1", connect: fmt.Sprintf("allowed.test:%d", tp), status: 200, decision: "allow", reason: none, ruleSet: none, times: 2},
		{from: "127.0.0.1", get: fmt.Sprintf("http://other.test:%d/", hp), status: 403, decision: "deny", reason: proxyconf.ReasonDestinationNotAllowed, ruleSet: none, times: 4},
		{from: "127.0.0.9", get: fmt.Sprintf("http://allowed.test:%d/", hp), status: 403, decision: "deny", reason: proxyconf.ReasonClientNotAllowed, ruleSet: none, times: 1},
		{from: "127.0.0.3", get: fmt.Sprintf("http://other.test:%d/", hp), status: 200, decision: "would_deny", reason: proxyconf.ReasonDestinationNotAllowed, ruleSet: "rollout", times: 5},
	}
	// One of each first, so that every series exists before the counted ones: Prometheus' increase() sees
	// nothing in a series' first sample.
	// Every line mtail has read so far: health checks and the sync request.
	seen := metricstest.Scrape(t, p.mtail.URL+"/metrics", "prog")[LogLinesTotal]
	lines := 0
	for _, e := range exchanges {
		e.times = 1
		p.send(t, e)
		lines++
	}
	want := seen + float64(lines)
	_, promBefore := p.caughtUp(t, want)
	squidBefore := metricstest.Query(t, p.prom.URL, "squid_client_http_requests_total", "instance", "job")
	logged := 0
	if !udp {
		logged = len(strings.Split(strings.TrimSpace(p.sq.File("access.log")), "\n"))
	}

	wantDelta := metricstest.Samples{}
	counted := 0
	for _, e := range exchanges {
		p.send(t, e)
		counted += e.times
		wantDelta[metricstest.Series(RequestsTotal, "decision", e.decision, "reason", e.reason, "rule_set", e.ruleSet)] += float64(e.times)
	}
	mtailAfter, promAfter := p.caughtUp(t, want+float64(counted))
	if !udp {
		connects := 0
		for _, a := range p.accessLines(t, logged) {
			wantDelta[metricstest.Series(BytesTotal, "direction", DirectionToClient)] += float64(a.BytesToClient)
			wantDelta[metricstest.Series(BytesTotal, "direction", DirectionFromClient)] += float64(a.BytesFromClient)
			if _, ok := a.connectMS(); ok {
				kind := KindHTTP
				if a.Method == "CONNECT" {
					kind = KindTunnel
				}
				wantDelta[metricstest.Series(ConnectDuration+"_count", "kind", kind)]++
				connects++
			}
		}
		// Every request that reached the upstreams has a connect time: the allowed and the would-deny ones.
		if connects != 3+2+5 {
			t.Errorf("%d access log lines with a connect time, want the 10 requests that reached a server", connects)
		}
	}
	wantDelta[LogLinesTotal] = float64(counted)
	delta := metricstest.Delta(promBefore, promAfter)
	for series, w := range wantDelta {
		if delta[series] != w {
			t.Errorf("Prometheus: %s moved by %v, want %v", series, delta[series], w)
		}
	}
	for series, d := range delta {
		if _, ok := wantDelta[series]; !ok && d != 0 && strings.HasPrefix(series, RequestsTotal) {
			t.Errorf("Prometheus: %s moved by %v, want no change", series, d)
		}
	}
	// Prometheus holds what mtail served.
	for series, v := range promAfter {
		if mtailAfter[series] != v {
			t.Errorf("%s: Prometheus has %v, mtail serves %v", series, v, mtailAfter[series])
		}
	}

	// Squid's own counter of client requests (the exporter's requests to the manager count too).
	p.prom.WaitFor(t, 30*time.Second, "scrape Squid's counters after the requests", func() (bool, string) {
		after, err := metricstest.TryQuery(p.prom.URL, "squid_client_http_requests_total", "instance", "job")
		d := metricstest.Delta(squidBefore, after)["squid_client_http_requests_total"]
		return err == nil && d >= float64(counted), fmt.Sprintf("moved by %v, %v", d, err)
	})

	// The example rule sees the rule set in report mode.
	p.prom.WaitFor(t, 30*time.Second, "fire EgressProxyRuleSetWouldDeny", func() (bool, string) {
		a, err := metricstest.TryQuery(p.prom.URL, `ALERTS{alertname="EgressProxyRuleSetWouldDeny",alertstate="firing"}`, "instance")
		key := metricstest.Series("ALERTS", "alertname", "EgressProxyRuleSetWouldDeny", "alertstate", "firing",
			"reason", proxyconf.ReasonDestinationNotAllowed, "rule_set", "rollout", "severity", "info")
		return err == nil && a[key] == 1, fmt.Sprintf("%v, %v", a, err)
	})
}
