package provider

import (
	"maps"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestProxyURL(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		inst backend.Instance
		tls  bool
		want string
	}{
		"address":                     {backend.Instance{InternalAddress: "10.0.0.10", Port: 3128}, false, "http://10.0.0.10:3128"},
		"tls":                         {backend.Instance{InternalAddress: "10.0.0.10", Port: 3129}, true, "https://10.0.0.10:3129"},
		"ipv6 in brackets":            {backend.Instance{InternalAddress: "fd00::1", Port: 3128}, false, "http://[fd00::1]:3128"},
		"a DNS name over the address": {backend.Instance{InternalAddress: "10.96.0.20", InternalName: "egress-1.proxies.svc", Port: 3128}, false, "http://egress-1.proxies.svc:3128"},
		// A name without an address is a Service whose IP is not assigned yet: nothing to connect to.
		"no address yet": {backend.Instance{InternalName: "egress-1.proxies.svc", Port: 3128}, false, ""},
		"no port yet":    {backend.Instance{InternalAddress: "10.0.0.10"}, false, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := proxyURL(tt.inst, tt.tls); got != tt.want {
				t.Errorf("proxyURL = %q, want %q", got, tt.want)
			}
		})
	}
}

// The placement conversions keep what the framework's ElementsAs gave before them: null stays nil, a known empty
// set an empty slice, and no element is dropped or reordered on the way back.
func TestStringSetConversions(t *testing.T) {
	cases := []struct {
		name string
		set  types.Set
		want []string
	}{
		{"null", types.SetNull(types.StringType), nil},
		{"unknown", types.SetUnknown(types.StringType), nil},
		{"empty", stringSetOf([]string{}), []string{}},
		{"values", stringSetOf([]string{"sg-1", "sg-2"}), []string{"sg-1", "sg-2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := stringsOf(tc.set)
			if (got == nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("stringsOf(%s) = %#v, want %#v", tc.set, got, tc.want)
			}
			if tc.want == nil {
				return
			}
			var viaFramework []string
			if d := tc.set.ElementsAs(t.Context(), &viaFramework, false); d.HasError() {
				t.Fatal(d)
			}
			if !slices.Equal(got, viaFramework) || (got == nil) != (viaFramework == nil) {
				t.Fatalf("stringsOf = %#v, the framework's ElementsAs = %#v", got, viaFramework)
			}
		})
	}
	labels := map[string]string{"team": "platform", "env": "prod"}
	var back map[string]string
	if d := stringMapOf(labels).ElementsAs(t.Context(), &back, false); d.HasError() || !maps.Equal(back, labels) {
		t.Fatalf("stringMapOf round trip = %v (%v), want %v", back, d, labels)
	}
}
