package metrics

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
)

// logLine is one access log line in the JSON format: the fields of proxyconf.JSONLogFields in that order, each
// value given as its JSON text; a field not in values is the string "-".
func logLine(values map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	for i, f := range proxyconf.JSONLogFields {
		if i > 0 {
			b.WriteString(",")
		}
		v, ok := values[f]
		if !ok {
			v = `"-"`
		}
		b.WriteString(strconv.Quote(f) + ":" + v)
	}
	b.WriteString("}")
	return b.String()
}

// mtailOn starts the real mtail with Program over a new, empty log file, and returns the file's path once
// mtail reads what is appended to it. mtail starts reading a file at its end, so lines written before it
// opened the file would never count: probe lines are appended until the line counter moves.
func mtailOn(t *testing.T) (*metricstest.Process, string) {
	t.Helper()
	dir := t.TempDir()
	progs := filepath.Join(dir, "progs")
	if err := os.Mkdir(progs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progs, ProgramFile), Program, 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "access.log")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := metricstest.Mtail(t, progs, log)
	m.WaitFor(t, 30*time.Second, "read the log", func() (bool, string) {
		appendLines(t, log, "probe: not an access log line")
		s, err := metricstest.TryScrape(m.URL+"/metrics", "prog")
		return err == nil && s[LogLinesTotal] > 0, "no line counted"
	})
	// Probes appended before mtail opened the file never count, those after it do, perhaps after the check
	// above: a line of its own kind, once counted, says mtail has read every line before it.
	appendLines(t, log, logLine(map[string]string{"rule_set": `"sync"`, "method": `"GET"`, "decision": `"allow"`,
		"status": `200`, "bytes_to_client": `0`, "bytes_from_client": `0`, "duration_ms": `0`}))
	sync := metricstest.Series(RequestsTotal, "decision", "allow", "reason", "-", "rule_set", "sync")
	m.WaitFor(t, 30*time.Second, "read the sync line", func() (bool, string) {
		s, err := metricstest.TryScrape(m.URL+"/metrics", "prog")
		return err == nil && s[sync] == 1, "not counted"
	})
	return m, log
}

func appendLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// One write, so mtail never sees half the batch.
	if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// scrapeAfter waits until mtail has counted lines lines more than in before, and returns what it serves then.
func scrapeAfter(t *testing.T, m *metricstest.Process, before metricstest.Samples, lines int) metricstest.Samples {
	t.Helper()
	var after metricstest.Samples
	want := before[LogLinesTotal] + float64(lines)
	m.WaitFor(t, 30*time.Second, "count the lines", func() (bool, string) {
		s, err := metricstest.TryScrape(m.URL+"/metrics", "prog")
		if err != nil {
			return false, err.Error()
		}
		after = s
		return s[LogLinesTotal] >= want, strconv.FormatFloat(s[LogLinesTotal], 'f', -1, 64) + " lines"
	})
	if after[LogLinesTotal] != want {
		t.Fatalf("mtail counted %v lines, want %v", after[LogLinesTotal], want)
	}
	return after
}

// TestProgramCountsEachRequestOnce runs the real mtail with Program on access log lines of every kind and
// checks that each metric moved by exactly what those lines say: one request each in its decision, reason and
// rule set, their bytes each way, their durations by kind, and the lines it could not read.
func TestProgramCountsEachRequestOnce(t *testing.T) {
	t.Parallel()
	type request struct {
		decision, reason, ruleSet string
		method                    string
		toClient, fromClient      int
		durationMS                int
		connectMS                 int // -1: no connect time to observe
	}
	tests := map[string]struct {
		values  map[string]string // the line's values as JSON text, by field
		raw     string            // a line given whole instead
		request *request          // what the line counts as; nil for a health check or a line the program cannot read
		health  bool              // a health check
	}{
		"allowed plain request": {
			values:  map[string]string{"time": `"2026-12-05T04:40:00.123Z"`, "client": `"192.0.2.10"`, "rule_set": `"-"`, "method": `"GET"`, "host": `"example.com"`, "port": `80`, "decision": `"allow"`, "reason": `"-"`, "status": `200`, "squid_status": `"TCP_MISS"`, "bytes_to_client": `1234`, "bytes_from_client": `87`, "duration_ms": `42`, "server": `"203.0.113.5"`, "server_total_ms": `"40"`, "server_response_ms": `"33"`},
			request: &request{"allow", "-", "-", "GET", 1234, 87, 42, 7},
		},
		"allowed tunnel of a rule set": {
			values:  map[string]string{"rule_set": `"payments"`, "method": `"CONNECT"`, "decision": `"allow"`, "reason": `"-"`, "status": `200`, "bytes_to_client": `50000`, "bytes_from_client": `3000`, "duration_ms": `12500`, "server": `"203.0.113.6"`, "server_total_ms": `"12499"`, "server_response_ms": `"12379"`},
			request: &request{"allow", "-", "payments", "CONNECT", 50000, 3000, 12500, 120},
		},
		"a tunnel the server sent nothing through": {
			values:  map[string]string{"method": `"CONNECT"`, "decision": `"allow"`, "reason": `"-"`, "status": `200`, "bytes_to_client": `39`, "bytes_from_client": `120`, "duration_ms": `15011`, "server": `"203.0.113.6"`, "server_total_ms": `"15011"`, "server_response_ms": `"-"`},
			request: &request{"allow", "-", "-", "CONNECT", 39, 120, 15011, -1},
		},
		"denied destination": {
			values:  map[string]string{"method": `"CONNECT"`, "decision": `"deny"`, "reason": `"destination_not_allowed"`, "status": `403`, "bytes_to_client": `0`, "bytes_from_client": `120`, "duration_ms": `0`},
			request: &request{"deny", "destination_not_allowed", "-", "CONNECT", 0, 120, 0, -1},
		},
		"would deny in report mode": {
			values:  map[string]string{"rule_set": `"rollout"`, "method": `"GET"`, "decision": `"would_deny"`, "reason": `"destination_not_allowed"`, "status": `200`, "bytes_to_client": `10`, "bytes_from_client": `90`, "duration_ms": `7`},
			request: &request{"would_deny", "destination_not_allowed", "rollout", "GET", 10, 90, 7, -1},
		},
		// Client-controlled text is percent-encoded, but a comma or a brace may stay as it is.
		"certificate subject with commas and braces": {
			values:  map[string]string{"cert_subject": `"CN=a,O=b{c}"`, "user": `"alice%22"`, "method": `"GET"`, "decision": `"deny"`, "reason": `"client_not_allowed"`, "status": `403`, "bytes_to_client": `0`, "bytes_from_client": `0`, "duration_ms": `1`},
			request: &request{"deny", "client_not_allowed", "-", "GET", 0, 0, 1, -1},
		},
		// The numbers may be rendered as JSON strings.
		"numbers as strings": {
			values:  map[string]string{"method": `"GET"`, "decision": `"allow"`, "reason": `"-"`, "port": `"80"`, "status": `"200"`, "bytes_to_client": `"5"`, "bytes_from_client": `"6"`, "duration_ms": `"3"`, "server_total_ms": `"3"`, "server_response_ms": `"1"`},
			request: &request{"allow", "-", "-", "GET", 5, 6, 3, 2},
		},
		"a health check": {
			values: map[string]string{"method": `"GET"`, "host": `"` + proxyconf.VisibleHostname + `"`, "decision": `"allow"`, "reason": `"-"`, "status": `200`, "bytes_to_client": `1500`, "bytes_from_client": `80`, "duration_ms": `0`},
			health: true,
		},
		// Anything else on the health port is refused, and counts as a request like any refusal.
		"refused on the health port": {
			values:  map[string]string{"method": `"GET"`, "host": `"` + proxyconf.VisibleHostname + `"`, "decision": `"deny"`, "reason": `"health_port_only"`, "status": `403`, "bytes_to_client": `3300`, "bytes_from_client": `80`, "duration_ms": `0`},
			request: &request{"deny", "health_port_only", "-", "GET", 3300, 80, 0, -1},
		},
		"the text format": {
			raw: `1733373600.123 client=192.0.2.10 user=- method=GET host=example.com port=80 status=200 squid=TCP_MISS bytes=10 server=203.0.113.5 reason=-`,
		},
		"fields out of order": {
			raw: `{"time":"-","client":"-","user":"-","cert_subject":"-","method":"GET","rule_set":"-","host":"-","port":80,"decision":"allow","reason":"-","status":200,"squid_status":"-","bytes_to_client":1,"bytes_from_client":1,"duration_ms":1,"server":"-"}`,
		},
	}

	m, log := mtailOn(t)
	before := metricstest.Scrape(t, m.URL+"/metrics", "prog")
	want := metricstest.Samples{}
	var lines []string
	for name, tt := range tests {
		line := tt.raw
		if line == "" {
			line = logLine(tt.values)
		}
		t.Logf("%s: %s", name, line)
		lines = append(lines, line)
		r := tt.request
		if tt.health {
			want[HealthChecksTotal]++
			continue
		}
		if r == nil {
			want[LogLinesUnparsedTotal]++
			continue
		}
		want[metricstest.Series(RequestsTotal, "decision", r.decision, "reason", r.reason, "rule_set", r.ruleSet)]++
		want[metricstest.Series(BytesTotal, "direction", DirectionToClient)] += float64(r.toClient)
		want[metricstest.Series(BytesTotal, "direction", DirectionFromClient)] += float64(r.fromClient)
		kind := KindHTTP
		if r.method == "CONNECT" {
			kind = KindTunnel
		}
		want[metricstest.Series(RequestDuration+"_count", "kind", kind)]++
		want[metricstest.Series(RequestDuration+"_sum", "kind", kind)] += float64(r.durationMS) / 1000
		if r.connectMS >= 0 {
			want[metricstest.Series(ConnectDuration+"_count", "kind", kind)]++
			want[metricstest.Series(ConnectDuration+"_sum", "kind", kind)] += float64(r.connectMS) / 1000
		}
	}
	want[LogLinesTotal] = float64(len(lines))
	appendLines(t, log, lines...)
	checkDelta(t, metricstest.Delta(before, scrapeAfter(t, m, before, len(lines))), want)
}

// checkDelta fails unless every egress_proxy series moved by what want says, and every other one not at all
// (histogram buckets are left out: their counts follow from _count and _sum's inputs).
func checkDelta(t *testing.T, delta, want metricstest.Samples) {
	t.Helper()
	for series, w := range want {
		if got := delta[series]; !near(got, w) {
			t.Errorf("%s moved by %v, want %v", series, got, w)
		}
	}
	for series, got := range delta {
		if _, ok := want[series]; !ok && got != 0 && strings.HasPrefix(series, "egress_proxy_") && !strings.Contains(series, "_bucket{") {
			t.Errorf("%s moved by %v, want no change", series, got)
		}
	}
}

// TestProgramKnowsTheHealthCheck keeps the host name the program tells health checks by the one Squid answers
// them under.
func TestProgramKnowsTheHealthCheck(t *testing.T) {
	t.Parallel()
	if !strings.Contains(string(Program), `$host == "`+proxyconf.VisibleHostname+`"`) {
		t.Errorf("the program does not tell health checks by %s", proxyconf.VisibleHostname)
	}
}

// near compares sums of float durations, which need not add up to the exact same bits in both orders.
func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}
