// Package metricstest runs the programs that export and collect the proxy's metrics (mtail, Prometheus,
// prometheus-squid-exporter) on loopback for tests, and reads what they serve.
package metricstest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Binary finds a program of the test environment at path or, failing that, on $PATH. The programs come with
// the Debian packages scripts/install-deps.sh installs for tests, so a missing one fails the test; only -short
// skips it.
func Binary(t testing.TB, name, path string) string {
	t.Helper()
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		return path
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if testing.Short() {
		t.Skipf("%s not installed; skipped in -short mode", name)
	}
	t.Fatalf("%s not found at %s or in $PATH: run scripts/install-deps.sh test, or run with -short", name, path)
	return ""
}

// Process is one program a test started; it is killed when the test ends.
type Process struct {
	Name   string
	URL    string // where it serves HTTP, http://127.0.0.1:port
	Output *testutil.LockedBuffer
	Exited <-chan struct{}
}

// Start starts cmd, which serves HTTP on url, kills it when the test ends, and waits until url+probe answers
// 200.
func Start(t testing.TB, name string, cmd *exec.Cmd, url, probe string) *Process {
	t.Helper()
	out := &testutil.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	// How it exited is in its output, which the failures below report.
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	p := &Process{Name: name, URL: url, Output: out, Exited: exited}
	p.WaitFor(t, 30*time.Second, "to answer "+probe, func() (bool, string) {
		code, _, err := get(url + probe)
		return code == http.StatusOK, fmt.Sprintf("status %d, %v", code, err)
	})
	return p
}

// WaitFor polls cond until it holds, and fails the test when the process exits first or limit passes; cond's
// string says what it saw last.
func (p *Process) WaitFor(t testing.TB, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-p.Exited:
			t.Fatalf("%s exited before %s (last: %s):\n%s", p.Name, what, last, p.Output)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not %s within %v (last: %s):\n%s", p.Name, what, limit, last, p.Output)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Mtail runs Debian's mtail with the programs in progDir over logs (paths or socket URLs), on a free port of
// 127.0.0.1.
func Mtail(t testing.TB, progDir string, logs ...string) *Process {
	t.Helper()
	port := squidtest.FreePort(t)
	args := []string{"-progs", progDir, "-address", "127.0.0.1", "-port", strconv.Itoa(port), "-logtostderr"}
	for _, l := range logs {
		args = append(args, "-logs", l)
	}
	cmd := exec.Command(Binary(t, "mtail", "/usr/bin/mtail"), args...)
	return Start(t, "mtail", cmd, fmt.Sprintf("http://127.0.0.1:%d", port), "/metrics")
}

// Samples are the values of a /metrics page by series, written name{label="value",...} with the labels in
// name order, as Series writes them.
type Samples map[string]float64

// Series is the key of one series in Samples: name and labels given as name, value pairs.
func Series(name string, labelPairs ...string) string {
	if len(labelPairs) == 0 {
		return name
	}
	type label struct{ k, v string }
	var ls []label
	for i := 0; i+1 < len(labelPairs); i += 2 {
		ls = append(ls, label{labelPairs[i], labelPairs[i+1]})
	}
	slices.SortFunc(ls, func(a, b label) int { return strings.Compare(a.k, b.k) })
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.k+"="+strconv.Quote(l.v))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// Scrape reads url's Prometheus text exposition, leaving out the labels named in drop (such as mtail's prog,
// which names the program file).
func Scrape(t testing.TB, url string, drop ...string) Samples {
	t.Helper()
	s, err := TryScrape(url, drop...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TryScrape is Scrape returning its error.
func TryScrape(url string, drop ...string) (Samples, error) {
	return tryScrape(context.Background(), http.DefaultTransport, url, drop...)
}

// TryScrapeFromNetns is TryScrape of http://address/metrics as a client at localIP in network namespace netns
// reaches it (a guest's metrics port, which admits some client ranges alone), within ctx.
func TryScrapeFromNetns(ctx context.Context, netns, localIP, address string, drop ...string) (Samples, error) {
	dial := testutil.DialFromNetns(netns, localIP, address)
	transport := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial(ctx)
	}}
	return tryScrape(ctx, transport, "http://"+address+"/metrics", drop...)
}

func tryScrape(ctx context.Context, transport http.RoundTripper, url string, drop ...string) (Samples, error) {
	code, body, err := getVia(ctx, transport, url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d: %s", url, code, body)
	}
	return ParseText(body, drop...)
}

// ParseText parses the Prometheus text exposition format: comments are skipped, each other line is a series
// and its value (and perhaps a timestamp). Labels named in drop are left out of the series.
func ParseText(text string, drop ...string) (Samples, error) {
	s := Samples{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, rest, err := splitSeries(line, drop)
		if err != nil {
			return nil, err
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", line, err)
		}
		// Series that differ only in dropped labels add up, as a sum over those labels would.
		s[series] += v
	}
	return s, sc.Err()
}

// splitSeries splits a sample line into its series, in Series' form, and what follows it.
func splitSeries(line string, drop []string) (series, rest string, err error) {
	open := strings.IndexAny(line, "{ \t")
	if open < 0 {
		return "", "", fmt.Errorf("no value in %q", line)
	}
	name := line[:open]
	if line[open] != '{' {
		return name, line[open:], nil
	}
	var pairs []string
	i := open + 1
	for {
		for i < len(line) && (line[i] == ',' || line[i] == ' ') {
			i++
		}
		if i < len(line) && line[i] == '}' {
			return Series(name, pairs...), line[i+1:], nil
		}
		eq := strings.Index(line[i:], "=")
		if eq < 0 || i+eq+1 >= len(line) || line[i+eq+1] != '"' {
			return "", "", fmt.Errorf("bad labels in %q", line)
		}
		key := strings.TrimSpace(line[i : i+eq])
		value, n, err := unquote(line[i+eq+1:])
		if err != nil {
			return "", "", fmt.Errorf("label %s in %q: %w", key, line, err)
		}
		if !slices.Contains(drop, key) {
			pairs = append(pairs, key, value)
		}
		i += eq + 1 + n
	}
}

// unquote reads the quoted label value at the start of s, and how many bytes it took.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("unterminated escape")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, fmt.Errorf("unterminated value")
}

// Delta is after minus before for every series in either.
func Delta(before, after Samples) Samples {
	d := Samples{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			d[k] = -v
		}
	}
	return d
}

func get(url string) (int, string, error) {
	return getVia(context.Background(), http.DefaultTransport, url)
}

// getVia GETs url within ctx and 10 seconds, over transport.
func getVia(ctx context.Context, transport http.RoundTripper, url string) (int, string, error) {
	c := http.Client{Timeout: 10 * time.Second, Transport: transport}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
