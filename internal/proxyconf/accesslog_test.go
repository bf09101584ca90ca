package proxyconf_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

// TestJSONLogFieldsAreStable: the field names and their order are an interface other programs match (a
// metrics exporter's pattern); changing them must be a decision, made here as well.
func TestJSONLogFieldsAreStable(t *testing.T) {
	t.Parallel()
	want := []string{"time", "client", "user", "cert_subject", "rule_set", "method", "host", "port",
		"decision", "reason", "status", "squid_status", "bytes_to_client", "bytes_from_client", "duration_ms", "server",
		"server_total_ms", "server_response_ms"}
	if !slices.Equal(proxyconf.JSONLogFields, want) {
		t.Errorf("JSONLogFields = %q, want %q", proxyconf.JSONLogFields, want)
	}
}

// TestLogFormatRendering: "text" renders what the zero value renders (every existing proxy's squid.conf,
// TestExistingConfigsRenderAsBefore); "json" renders one logformat token and notes a decision on every
// http_access line, with or without a policy; anything else is refused; and settings that leave the format
// at its zero value marshal as they did before it existed, so the settings the backends keep do not change.
func TestLogFormatRendering(t *testing.T) {
	t.Parallel()
	for name, s := range proxyconftest.ParseCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			zero, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.LogFormat = proxyconf.LogFormatText
			text, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(text) != string(zero) {
				t.Errorf("text renders otherwise than the zero value")
			}
			s.LogFormat = proxyconf.LogFormatJSON
			conf, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var logformats int
			for _, l := range strings.Split(string(conf), "\n") {
				f := strings.Fields(l)
				switch {
				case len(f) > 0 && f[0] == "logformat":
					logformats++
					if len(f) != 3 || !strings.HasPrefix(f[2], `{"time":`) {
						t.Errorf("the JSON logformat is not one token: %q", l)
					}
				case len(f) > 0 && f[0] == "http_access" && !strings.Contains(l, " decision_") &&
					!slices.Equal(f, []string{"http_access", "deny", "!authenticated"}):
					// The authentication check's decision is noted ahead of it (writeAuthentication).
					t.Errorf("an http_access line notes no decision: %q", l)
				}
			}
			if logformats != 1 {
				t.Errorf("%d logformat lines, want 1", logformats)
			}
		})
	}
	s := proxyconftest.ParseCases()["a deny list alone"]
	s.LogFormat = "JSON"
	if _, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{}); err == nil {
		t.Error(`log format "JSON" rendered`)
	}
	b, err := json.Marshal(proxyconf.Settings{Port: 3128})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "LogFormat") {
		t.Errorf("settings with no log format marshal with one: %s", b)
	}
}
