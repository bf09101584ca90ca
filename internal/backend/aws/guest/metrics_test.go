package guest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// The agent writes, for a config's metrics ports, exactly the files vmguest.MetricsFiles renders for them
// (what the kvm and gcp guests write), from the templates the user-data carries; none without metrics. Ports
// other than the templates' own samples, so a token left unreplaced, or a sample left in, fails.
func TestAgentMetricsFilesAsVMGuest(t *testing.T) {
	t.Parallel()
	type file struct{ Path, Content string }
	cases := []*MetricsPorts{
		nil,
		{Port: proxyconf.DefaultMetricsPort, SquidPort: proxyconf.DefaultSquidMetricsPort, ManagerPort: proxyconf.DefaultManagerPort},
		{Port: 9100, SquidPort: 9101, ManagerPort: 3131},
	}
	b, err := RenderUserDataWith(UserDataOptions{Region: "eu-west-1", ParameterPrefix: ParameterPath("p", "")}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	settings, _ := userDataParts(t, b)
	var cfg agentSettings
	if err := json.Unmarshal([]byte(settings), &cfg); err != nil {
		t.Fatal(err)
	}
	out := python3(t, `in_ = json.load(sys.stdin)
for ports in in_["cases"]:
    print(json.dumps([{"Path": p, "Content": c.decode()} for p, c in agent.metrics_files(in_["metrics"], ports)]))`,
		map[string]any{"metrics": cfg.Metrics, "cases": cases})
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("the agent printed %d lines for %d cases:\n%s", len(lines), len(cases), out)
	}
	for i, ports := range cases {
		var got []file
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		want := []file{}
		if ports != nil {
			s := proxyconf.Settings{Metrics: &proxyconf.MetricsSettings{Port: ports.Port, SquidPort: ports.SquidPort}}
			for _, f := range vmguest.MetricsFiles(s, ports.ManagerPort) {
				want = append(want, file{Path: f.Path, Content: string(f.Content)})
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ports %+v: the agent's metrics files (-vmguest.MetricsFiles +agent):\n%s", ports, diff)
		}
	}
	// Every path the agent writes is one it removes when metrics go off.
	for _, f := range cfg.Metrics.Files {
		if !strings.Contains(strings.Join(cfg.Metrics.Paths, "\n")+"\n", f.Path+"\n") {
			t.Errorf("%s is written but not among the paths removed", f.Path)
		}
	}
}
