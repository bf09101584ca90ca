package guest

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The agent installs a config only when its MAC is the one the proxy's key gives and it holds nothing the
// renderer never writes (issue 35: whoever may write the config parameter must not choose what runs as root
// on the proxy). Each case is a config as a writer of the parameter could make it; the agent's own functions
// judge it, as the guest's cycle calls them.
func TestAgentRefusesWhatTheProviderDidNotWrite(t *testing.T) {
	t.Parallel()
	prefix := ParameterPath("p", "")
	key := make([]byte, ConfigKeyBytes)
	for i := range key {
		key[i] = byte(i + 1)
	}
	cert, certKey := testutil.SelfSignedPEM(t, "proxy.test")
	withTLS := proxyconf.Settings{Port: 8443, AllowedClientCIDRs: []string{"10.0.0.0/8", "2001:db8::/32"}, AllowedDestinations: []string{"a.example", ".b.example"},
		AllowedPorts: []int{443, 8443}, AllowedPrivateCIDRs: []string{"10.2.0.0/16"}, MaxConnectionsPerClient: 7,
		Users: []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}}, TLS: &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: certKey},
		Timeouts: proxyconf.Timeouts{RequestHeaders: 3 * time.Minute, Connect: 4 * time.Second, Idle: time.Hour}}
	settings := map[string]proxyconf.Settings{
		"plain":    {Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}},
		"no rules": {Port: proxyconf.DefaultPort},
		"auth":     {Port: 3000, AllowedClientCIDRs: []string{"0.0.0.0/0"}, AllowedDestinations: []string{"x.example"}, Users: []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}}},
		"tls":      withTLS,
		// Issue 39's policy: rule sets by range and by user, one reported, and a deny list.
		"policy": {Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"x.example"},
			DeniedDestinations: []string{"denied.example", ".denied.example"},
			Users:              []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}, {Username: "v", Password: "staple-horse-battery"}},
			RuleSets: []proxyconf.RuleSet{
				{Name: "builds", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}}, Destinations: []string{".pkg.example"}, Ports: []int{443, 8443}},
				{Name: "v-rollout", Clients: proxyconf.RuleSetClients{Users: []string{"v"}}, Destinations: []string{"y.example"}, Mode: proxyconf.RuleSetReport},
			}},
	}
	// And by client certificate, with the client CA and its CRL, which the config carries beside squid.conf.
	clientCA := testutil.NewClientCA(t, "client CA")
	byCert := withTLS
	byCert.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: certKey, ClientCAPEM: clientCA.PEM, ClientCRLPEM: clientCA.CRL(t, 1)}
	byCert.RuleSets = []proxyconf.RuleSet{{Name: "payments", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"payments"}}, Destinations: []string{"a.example"}}}
	settings["client ca"] = byCert
	// With metrics: the cache manager's port in squid.conf, the metrics chain in the backstop, the ports in
	// the config, which the MAC covers.
	settings["metrics"] = proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"x.example"},
		LogFormat: proxyconf.LogFormatJSON, Metrics: &proxyconf.MetricsSettings{Port: 9100, AllowedClientCIDRs: []string{"192.0.2.0/24"}}}
	type input struct {
		Name    string
		Config  Config
		Secrets Secrets
	}
	type want struct {
		authentic bool
		refusal   string // in the guards' reason; "" when they let it through
	}
	var inputs []input
	wants := map[string]want{}
	add := func(name string, c Config, sec Secrets, w want) {
		inputs = append(inputs, input{name, c, sec})
		wants[name] = w
	}
	resign := func(c Config, k []byte) Config { c.MAC = ConfigMAC(k, prefix, c); return c }
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		config, secrets, _, err := RenderParameters(settings[name], prefix, key)
		if err != nil {
			t.Fatal(err)
		}
		var c Config
		var sec Secrets
		if json.Unmarshal(config, &c) != nil || json.Unmarshal(secrets, &sec) != nil {
			t.Fatal("not JSON")
		}
		add("rendered "+name, c, sec, want{authentic: true})
		if name == "client ca" {
			// Whom the proxy trusts is the provider's to say: another CA, or a CRL dropped so a revoked
			// certificate passes again, is not authenticated without the key.
			other := c
			other.ClientCA = testutil.NewClientCA(t, "someone else's CA").PEM
			add("another client CA without the key", other, sec, want{})
			noCRL := c
			noCRL.ClientCRL = ""
			add("the CRL dropped without the key", noCRL, sec, want{})
			add("the client CA re-signed with the key", resign(other, key), sec, want{authentic: true})
		}
		if name == "metrics" {
			if c.Metrics == nil || *c.Metrics != (MetricsPorts{Port: 9100, SquidPort: proxyconf.DefaultSquidMetricsPort, ManagerPort: proxyconf.DefaultManagerPort}) {
				t.Fatalf("the config's metrics = %+v, want ports 9100, %d and the manager's %d", c.Metrics, proxyconf.DefaultSquidMetricsPort, proxyconf.DefaultManagerPort)
			}
			// Which ports the programs open is the provider's to say.
			moved := c
			moved.Metrics = &MetricsPorts{Port: 22, SquidPort: c.Metrics.SquidPort, ManagerPort: c.Metrics.ManagerPort}
			add("metrics moved without the key", moved, sec, want{})
			dropped := c
			dropped.Metrics = nil
			add("metrics dropped without the key", dropped, sec, want{})
			add("metrics moved and re-signed with the key", resign(moved, key), sec, want{authentic: true})
		}
		if name != "tls" {
			continue
		}
		edit := func(f func(string) string) Config { e := c; e.SquidConf = f(c.SquidConf); return resign(e, key) }
		appendLine := func(l string) Config { return edit(func(s string) string { return s + l + "\n" }) }
		add("edited without the key", func() Config { e := c; e.SquidConf += "url_rewrite_program /bin/sh\n"; return e }(), sec, want{})
		add("signed with another key", resign(c, make([]byte, ConfigKeyBytes)), sec, want{refusal: ""})
		wrongPrefix := c
		wrongPrefix.MAC = ConfigMAC(key, ParameterPath("other", ""), c)
		add("another proxy's config", wrongPrefix, sec, want{})
		noKey := sec
		noKey.ConfigKey = ""
		add("secrets without a key", c, noKey, want{})
		add("url_rewrite_program", appendLine("url_rewrite_program /bin/sh -c id"), sec, want{true, "url_rewrite_program"})
		add("include", appendLine("include /tmp/x.conf"), sec, want{true, "include"})
		add("external_acl_type", appendLine("external_acl_type x %SRC /bin/sh"), sec, want{true, "external_acl_type"})
		add("another auth helper", edit(func(s string) string {
			return strings.Replace(s, "/usr/lib/squid/basic_ncsa_auth", "/bin/sh", 1)
		}), sec, want{true, "auth_param"})
		add("access log to a daemon", edit(func(s string) string {
			return strings.Replace(s, "access_log stdio:", "access_log daemon:", 1)
		}), sec, want{true, "access_log"})
		add("acl from another file", appendLine(`acl leak src "/etc/shadow"`), sec, want{true, "names a file"})
		add("acl of a helper type", appendLine("acl x external y"), sec, want{true, "acl of a type"})
		add("port option", edit(func(s string) string {
			return strings.Replace(s, "tls-min-version=1.2", "tls-min-version=1.2 ssl-bump", 1)
		}), sec, want{true, "options"})
		add("continued line", appendLine("acl a src 10.0.0.1 \\\nurl_rewrite_program /bin/sh"), sec, want{true, "url_rewrite_program"})
		bs := func(f func(string) string) Config { e := c; e.Backstop = f(c.Backstop); return resign(e, key) }
		add("empty backstop", bs(func(string) string { return "" }), sec, want{true, "backstop lacks"})
		add("backstop without its output chain", bs(func(s string) string {
			return strings.Replace(s, "meta skuid \"proxy\" jump from_proxy", "", 1)
		}), sec, want{true, "backstop lacks"})
		add("backstop that deletes another table", bs(func(s string) string { return s + "delete table inet filter\n" }), sec, want{true, "outside its table"})
		add("backstop with a second table", bs(func(s string) string { return s + "table ip nat {\n}\n" }), sec, want{true, "outside its table"})
	}
	out := python3(t, `d = json.load(sys.stdin)
g = d["guard"]
for i in d["inputs"]:
    c, s = i["Config"], i["Secrets"]
    print(json.dumps([i["Name"], agent.authenticated(c, s, d["prefix"]), agent.guard_squid_conf(c["squid_conf"], g) or agent.guard_backstop(c["backstop"], g) or ""]))`,
		map[string]any{"guard": guardOnce(), "prefix": prefix, "inputs": inputs})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("the agent judged %d configs, want %d:\n%s", len(lines), len(inputs), out)
	}
	for _, l := range lines {
		var name, why string
		var authentic bool
		if err := json.Unmarshal([]byte(l), &[]any{&name, &authentic, &why}); err != nil {
			t.Fatal(err)
		}
		w := wants[name]
		if authentic != w.authentic {
			t.Errorf("%s: authenticated = %v, want %v", name, authentic, w.authentic)
		}
		if !w.authentic {
			continue
		}
		if (w.refusal == "") != (why == "") || !strings.Contains(why, w.refusal) {
			t.Errorf("%s: the guards say %q, want a refusal containing %q", name, why, w.refusal)
		}
	}
}

// The MAC is over the key the secrets hold, in the form the agent decodes.
func TestConfigKeyInSecrets(t *testing.T) {
	t.Parallel()
	key, err := NewConfigKey()
	if err != nil {
		t.Fatal(err)
	}
	config, secrets, _, err := RenderParameters(proxyconf.Settings{Port: proxyconf.DefaultPort}, ParameterPath("p", ""), key)
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	var sec Secrets
	if json.Unmarshal(config, &c) != nil || json.Unmarshal(secrets, &sec) != nil {
		t.Fatal("not JSON")
	}
	if got, _ := base64.StdEncoding.DecodeString(sec.ConfigKey); string(got) != string(key) {
		t.Error("the secrets do not hold the config key")
	}
	if strings.Contains(string(config), sec.ConfigKey) {
		t.Error("the config parameter holds the key")
	}
	if c.MAC != ConfigMAC(key, ParameterPath("p", ""), c) {
		t.Error("the config's MAC is not ConfigMAC")
	}
	if _, _, _, err := RenderParameters(proxyconf.Settings{Port: proxyconf.DefaultPort}, ParameterPath("p", ""), key[:16]); err == nil {
		t.Error("a short key was accepted")
	}
}
