package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
)

// The examples a user loads into Prometheus and Grafana.
var (
	rulesFile     = filepath.Join("..", "..", "examples", "metrics", "egress-proxy.rules.yml")
	rulesTestFile = filepath.Join("..", "..", "examples", "metrics", "egress-proxy.rules.test.yml")
	dashboardFile = filepath.Join("..", "..", "examples", "metrics", "dashboard.json")
)

func promtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(metricstest.Binary(t, "promtool", "/usr/bin/promtool"), args...).CombinedOutput()
	return string(out), err
}

// TestAlertRules has Prometheus' own tool check the example alert rules, and run their unit tests: each alert
// fires on the series it is written for, after its for: delay, with its annotations, and not on the others.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"check": {"check", "rules", rulesFile},
		"test":  {"test", "rules", rulesTestFile},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if out, err := promtool(t, args...); err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// dashboardExprs are the PromQL expressions of the example dashboard's panels, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	exprs := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs[p.Title] = append(exprs[p.Title], tg.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return exprs
}

// TestDashboardQueriesParse has promtool parse every query of the example dashboard, as recording rules of a
// file the test writes, with Grafana's variable replaced by what it stands for.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			n++
			e = strings.ReplaceAll(e, "$instance", ".*")
			rules.WriteString("      # " + title + "\n")
			rules.WriteString("      - record: dashboard:query" + strconv.Itoa(n) + "\n")
			rules.WriteString("        expr: " + strconv.Quote(e) + "\n")
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, "check", "rules", path); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, rules.String())
	}
}

// TestExamplesNameExportedMetrics fails when the rules or the dashboard name an egress_proxy metric the
// program does not export, so a renamed metric cannot leave a panel or an alert silently empty.
func TestExamplesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	declared := []string{RequestsTotal, BytesTotal, HealthChecksTotal, LogLinesTotal, LogLinesUnparsedTotal, RequestDuration, ConnectDuration,
		ActiveRequests, ActiveTunnels, ClientActiveRequestsMax}
	for _, name := range declared {
		if !regexp.MustCompile(`(?m)^(counter|histogram|gauge) ` + name + `\b`).Match(Program) {
			t.Errorf("the program does not declare %s", name)
		}
	}
	exported := declared
	for _, h := range []string{RequestDuration, ConnectDuration} {
		exported = append(exported, h+"_bucket", h+"_sum", h+"_count")
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{rulesFile: string(rules)}
	for title, exprs := range dashboardExprs(t) {
		texts["dashboard panel "+strconv.Quote(title)] = strings.Join(exprs, "\n")
	}
	// A metric name, not a recorded rule's (those have colons around them).
	names := regexp.MustCompile(`(?:^|[^:a-z_])(egress_proxy_[a-z_]+)`)
	for where, text := range texts {
		for _, m := range names.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(exported, m[1]) {
				t.Errorf("%s names %s, which the program does not export", where, m[1])
			}
		}
	}
}
