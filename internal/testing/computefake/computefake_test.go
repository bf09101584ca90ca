package computefake

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	in := &computepb.Instance{Name: proto.String("egress-1"), Status: proto.String("RUNNING"), Labels: map[string]string{"a": "x", "b": "y-1"}}
	for filter, want := range map[string]bool{
		``:                                      true,
		`labels.a = "x"`:                        true,
		`labels.a = x`:                          true,
		`labels.a="x"`:                          true,
		`(labels.a = "x") (labels.b = "y-1")`:   true,
		`(labels.a = "x") AND (labels.b = "z")`: false,
		`labels.a != "x"`:                       false,
		`labels.c != "x"`:                       true,
		`labels.a:*`:                            true,
		`labels.c:*`:                            false,
		`labels.b eq "y-.*"`:                    true,
		`labels.b ne "y-.*"`:                    false,
		`name = "egress-1" status = RUNNING`:    true,
	} {
		f, err := parseFilter(filter)
		if err != nil {
			t.Errorf("%q: %v", filter, err)
			continue
		}
		if got := f.match(in); got != want {
			t.Errorf("%q matched %v, want %v", filter, got, want)
		}
	}
	for _, bad := range []string{`labels.a = "x" OR labels.b = "y"`, `zone = x`, `labels.a`, `labels.a > 1`, `labels.a = "x`} {
		if _, err := parseFilter(bad); err == nil {
			t.Errorf("%q parsed, want an error", bad)
		}
	}
}

func TestStrictBodiesAndUnknownRoutes(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	defer s.Close()
	for name, tc := range map[string]struct {
		method, path, body string
		want               int
	}{
		"unknown field":   {http.MethodPost, "/compute/v1/projects/p/zones/us-central1-a/instances", `{"name":"x","machineTyp":"e2-small"}`, 400},
		"unknown route":   {http.MethodGet, "/compute/v1/projects/p/global/networks", "", 501},
		"unknown zone":    {http.MethodGet, "/compute/v1/projects/p/zones/mars-1-a/instances/x", "", 404},
		"bad filter":      {http.MethodGet, "/compute/v1/projects/p/aggregated/instances?filter=labels.a+%3E+1", "", 400},
		"metadata flavor": {http.MethodGet, "/computeMetadata/v1/instance/attributes/x", "", 403},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", name, resp.StatusCode, tc.want)
		}
	}
}

// An insert's shieldedInstanceConfig is kept and answered on get, as Compute Engine does; the metadata
// server names the instance's addresses under network-interfaces/ as the real one lays them out.
func TestShieldedConfigAndNetworkInterfacePaths(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	defer s.Close()
	do := func(method, path, flavor, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		if flavor != "" {
			req.Header.Set("Metadata-Flavor", flavor)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const base = "/compute/v1/projects/p/zones/us-central1-a/instances"
	insert := `{"name":"vm-1","machineType":"zones/us-central1-a/machineTypes/e2-small",
		"disks":[{"boot":true,"initializeParams":{"sourceImage":"projects/debian-cloud/global/images/family/debian-12"}}],
		"networkInterfaces":[{"accessConfigs":[{"name":"External NAT","type":"ONE_TO_ONE_NAT"}]}],
		"shieldedInstanceConfig":{"enableSecureBoot":true,"enableVtpm":true,"enableIntegrityMonitoring":true}}`
	if code, body := do(http.MethodPost, base, "", insert); code != http.StatusOK {
		t.Fatalf("insert: %d %s", code, body)
	}
	code, body := do(http.MethodGet, base+"/vm-1", "", "")
	got := &computepb.Instance{}
	if err := protojson.Unmarshal([]byte(body), got); code != http.StatusOK || err != nil {
		t.Fatalf("get: %d %v %s", code, err, body)
	}
	if sc := got.GetShieldedInstanceConfig(); !sc.GetEnableSecureBoot() || !sc.GetEnableVtpm() || !sc.GetEnableIntegrityMonitoring() {
		t.Fatalf("get answered shieldedInstanceConfig %v, want the inserted one", sc)
	}

	s.MetadataInstance("p", "us-central1-a", "vm-1")
	nic := got.GetNetworkInterfaces()[0]
	const md = "/computeMetadata/v1/instance/network-interfaces/"
	for path, want := range map[string]string{
		"":                               "0/\n",
		"0/ip":                           nic.GetNetworkIP(),
		"0/access-configs/":              "0/\n",
		"0/access-configs/0/external-ip": nic.GetAccessConfigs()[0].GetNatIP(),
	} {
		if code, body := do(http.MethodGet, md+path, "Google", ""); code != http.StatusOK || body != want || want == "" {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
	for _, path := range []string{"1/ip", "0/access-configs/1/external-ip", "0/mac", "x/ip"} {
		if code, _ := do(http.MethodGet, md+path, "Google", ""); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, code)
		}
	}
}
