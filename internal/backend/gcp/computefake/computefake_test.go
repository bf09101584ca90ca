package computefake

import (
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
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
