package metricstest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// SquidExporter runs Debian's prometheus-squid-exporter against the cache manager of the Squid listening on
// manager (host:port), on a free port of 127.0.0.1.
func SquidExporter(t testing.TB, manager string) *Process {
	t.Helper()
	host, port, err := splitHostPort(manager)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	cmd := exec.Command(Binary(t, "prometheus-squid-exporter", "/usr/bin/prometheus-squid-exporter"),
		"-listen", listen, "-squid-hostname", host, "-squid-port", port)
	return Start(t, "prometheus-squid-exporter", cmd, "http://"+listen, "/metrics")
}

func splitHostPort(hostport string) (string, string, error) {
	i := strings.LastIndex(hostport, ":")
	if i < 0 {
		return "", "", fmt.Errorf("%q has no port", hostport)
	}
	return hostport[:i], hostport[i+1:], nil
}

// Target is one scrape job of Prometheus: its name and the host:port it scrapes /metrics of.
type Target struct {
	Job, Address string
}

// Prometheus runs Debian's prometheus on a free port of 127.0.0.1 with its data in a directory of the test,
// scraping targets every second and evaluating ruleFiles (absolute paths) as often.
func Prometheus(t testing.TB, ruleFiles []string, targets ...Target) *Process {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	cmd := exec.Command(Binary(t, "prometheus", "/usr/bin/prometheus"), prometheusArgs(t, listen, ruleFiles, targets)...)
	return Start(t, "prometheus", cmd, "http://"+listen, "/-/ready")
}

// prometheusArgs writes the configuration of a Prometheus scraping targets every second and evaluating
// ruleFiles as often, and returns its arguments for listening on listen, its data in a directory of the test.
func prometheusArgs(t testing.TB, listen string, ruleFiles []string, targets []Target) []string {
	t.Helper()
	dir := t.TempDir()
	var conf strings.Builder
	conf.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	if len(ruleFiles) > 0 {
		conf.WriteString("rule_files:\n")
		for _, f := range ruleFiles {
			conf.WriteString("  - " + strconv.Quote(f) + "\n")
		}
	}
	conf.WriteString("scrape_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&conf, "  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", strconv.Quote(tg.Job), tg.Address)
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{
		"--config.file=" + confPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + listen,
		// Only what the test asks; nothing of the machine's console libraries.
		"--web.console.templates=" + filepath.Join(dir, "consoles"),
		"--web.console.libraries=" + filepath.Join(dir, "console_libraries"),
	}
}

// Query evaluates the instant query q in the Prometheus at url, and returns its vector by series, leaving
// out the labels named in drop.
func Query(t testing.TB, promURL, q string, drop ...string) Samples {
	t.Helper()
	s, err := TryQuery(promURL, q, drop...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TryQuery is Query returning its error.
func TryQuery(promURL, q string, drop ...string) (Samples, error) {
	code, body, err := get(promURL + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("query %s: status %d: %w: %s", q, code, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, not a vector", q, r.Data.ResultType)
	}
	s := Samples{}
	for _, v := range r.Data.Result {
		var pairs []string
		name := v.Metric["__name__"]
		for k, lv := range v.Metric {
			if k != "__name__" && !slices.Contains(drop, k) {
				pairs = append(pairs, k, lv)
			}
		}
		str, ok := v.Value[1].(string)
		if !ok {
			return nil, fmt.Errorf("query %s: value %v is not a string", q, v.Value[1])
		}
		f, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", q, err)
		}
		s[Series(name, pairs...)] += f
	}
	return s, nil
}
