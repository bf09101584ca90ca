package provider

import (
	"testing"

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
