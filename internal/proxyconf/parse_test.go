package proxyconf_test

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestSquidParsesEveryConfig runs `squid -k parse` on each combination and accepts no warning: Squid's
// warnings are about configs that do not mean what they say. Each guest package runs the same cases on its
// own form (the kubernetes guest's TestSquidParsesEveryPodConfig).
func TestSquidParsesEveryConfig(t *testing.T) {
	t.Parallel()
	for name, s := range proxyconftest.ParseCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conf, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out, complaints, err := squidtest.Complaints(t, conf)
			if err != nil {
				t.Fatalf("vm form: squid -k parse: %v\n%s\n%s", err, out, conf)
			}
			for _, line := range complaints {
				t.Errorf("vm form: squid -k parse: %s", line)
			}
		})
	}
}
