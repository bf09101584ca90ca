package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// The end-to-end test boots the proxy image under QEMU on the namespaced libvirt network and sends traffic
// through the guest's Squid from inside that namespace, to upstream servers the test runs there too. Nothing
// it starts can reach, or be reached from, outside the namespace.

const (
	e2eNetwork = "egress-test"
	e2eGateway = "198.18.0.1" // the libvirt network's bridge address, where the upstreams listen
	e2eUser    = "e2e-user"
	e2ePass    = "e2e-password-1"
)

func e2eNetns() string {
	if ns := os.Getenv("EGRESS_LIBVIRT_NETNS"); ns != "" {
		return ns
	}
	return "egress-test"
}

// startUpstreams runs this test binary again inside the namespace as the upstream HTTP and HTTPS servers.
func startUpstreams(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", e2eNetns(), self, "-test.run=^$")
	cmd.Env = append(os.Environ(), upstreamEnvVar+"="+e2eGateway)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", e2eNetns(), "curl", "-s", "--max-time", "2", "http://"+e2eGateway+"/").Output()
		if strings.HasPrefix(string(out), "upstream") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the upstream servers did not start in the namespace")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// addDNSHosts names the upstreams on the libvirt network's DNS, which the guest uses through DHCP.
func addDNSHosts(t *testing.T, uri string, names ...string) {
	t.Helper()
	addDNSHostAt(t, uri, e2eGateway, names...)
}

// addDNSHostAt names ip on the libvirt network's DNS, which the guest uses.
func addDNSHostAt(t *testing.T, uri, ip string, names ...string) {
	t.Helper()
	var hostnames strings.Builder
	for _, n := range names {
		fmt.Fprintf(&hostnames, "<hostname>%s</hostname>", n)
	}
	entry := fmt.Sprintf("<host ip='%s'>%s</host>", ip, hostnames.String())
	// A previous run killed midway may have left the entry: replace it rather than fail.
	_ = exec.Command("virsh", "-q", "-c", uri, "net-update", e2eNetwork, "delete", "dns-host", entry, "--live").Run()
	virsh(t, uri, "net-update", e2eNetwork, "add", "dns-host", entry, "--live")
	t.Cleanup(func() {
		_ = exec.Command("virsh", "-q", "-c", uri, "net-update", e2eNetwork, "delete", "dns-host", entry, "--live").Run()
	})
}

// proxied sends one request through the proxy from inside the namespace and returns the CONNECT status (for
// https URLs) and the final HTTP status, as curl reports them ("000" when there was none).
func proxied(t *testing.T, proxy, credentials, url string) (connect, status string) {
	t.Helper()
	return curlThrough(t, []string{"-x", "http://" + proxy}, credentials, url)
}

// curlThrough runs curl inside the namespace with the proxy arguments given and returns the CONNECT status
// and the final HTTP status.
func curlThrough(t *testing.T, proxyArgs []string, credentials, url string) (connect, status string) {
	t.Helper()
	// 60 s: a guest under emulation beside make test's other VMs once took more than 20 s to answer a 407.
	args := append([]string{"netns", "exec", e2eNetns(), "curl", "-sS", "-k", "-o", "/dev/null", "--max-time", "60",
		"-w", "%{http_connect} %{http_code}"}, proxyArgs...)
	if credentials != "" {
		args = append(args, "--proxy-user", credentials)
	}
	var stderr strings.Builder
	cmd := exec.Command("ip", append(args, url)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output() // curl exits non-zero on a refused CONNECT
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("curl via %v to %s printed %q (%v: %s)", proxyArgs, url, out, err, stderr.String())
	}
	if fields[1] == "000" && fields[0] == "000" {
		// No answer at all: say why (refused, reset, timed out), which the statuses cannot.
		t.Logf("curl via %v to %s: no answer (%v: %s)", proxyArgs, url, err, strings.TrimSpace(stderr.String()))
	}
	return fields[0], fields[1]
}

// waitUntilServing waits for the guest to boot, run cloud-init and start Squid with the rendered config.
func waitUntilServing(t *testing.T, proxy string) {
	t.Helper()
	deadline := time.Now().Add(12 * time.Minute)
	start := time.Now()
	for {
		// Any answer will do, a 407 included: it comes from Squid with the rendered configuration.
		if _, status := proxied(t, proxy, "", "http://denied.test/"); status != "000" {
			t.Logf("proxy %s answered %v after the apply", proxy, time.Since(start).Round(time.Second))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy %s did not answer within 12 minutes of the apply", proxy)
		}
		time.Sleep(5 * time.Second)
	}
}

type proxyExpectation struct {
	url, credentials, connect, status string
}

func checkProxyServes(t *testing.T, expectations []proxyExpectation) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs := s.RootModule().Resources["egress_proxy.e2e"]
		proxy := rs.Primary.Attributes["internal_address"] + ":" + rs.Primary.Attributes["port"]
		if rs.Primary.Attributes["proxy_url"] != "http://"+proxy {
			return fmt.Errorf("proxy_url %q does not name %s", rs.Primary.Attributes["proxy_url"], proxy)
		}
		waitUntilServing(t, proxy)
		for _, e := range expectations {
			connect, status := proxied(t, proxy, e.credentials, e.url)
			if connect != e.connect || status != e.status {
				return fmt.Errorf("%s with credentials %q: CONNECT %s, status %s; want CONNECT %s, status %s",
					e.url, e.credentials, connect, status, e.connect, e.status)
			}
		}
		return nil
	}
}

// One booted proxy, changed in place four times: its allow-list swapped (same id, same address, the new rules
// enforced when the apply returns), its write-only password rotated (the old one 407, the new one 200), a rule
// set added in report mode (what it does not list still 200), then enforced (403).
// The password is in no state, plan or trace log.
func TestAccProxyKVM_bootedProxyServesOnlyAllowedDestinations(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := os.Getenv("EGRESS_TEST_IMAGE")
	if image == "" {
		t.Fatal("EGRESS_TEST_IMAGE must name the proxy image: `make image` builds it, `make testacc` sets it")
	}
	startUpstreams(t)
	addDNSHosts(t, uri, "allowed.test", "denied.test")
	// Every CLI and provider log line of the test, at TRACE, goes to this file, which is searched for the
	// password at the end.
	logFile := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_ACC_LOG_PATH", logFile)
	t.Setenv("TF_LOG", "TRACE")
	owner := "e2e-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	password := func(version int) string { return fmt.Sprintf("%s-v%d", e2ePass, version) }
	config := func(destinations string, passwordVersion int, ruleSets ...string) string {
		ruleSetsLine := ""
		if len(ruleSets) > 0 {
			ruleSetsLine = "rule_sets = [" + strings.Join(ruleSets, ", ") + "]"
		}
		return kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "e2e" {
  kvm = {
    image_file = %q
    memory_mib = 512
  }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = %s
  auth = {
    username            = %q
    password_wo         = %q
    password_wo_version = %d
  }
  %s
  timeouts {
    create = "20m"
  }
}
`, image, destinations, e2eUser, password(passwordVersion), passwordVersion, ruleSetsLine)
	}
	credentials := func(version int) string { return e2eUser + ":" + password(version) }
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	unchanged := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.e2e", tfjsonpath.New("id")),
			sameAddress.AddStateValue("egress_proxy.e2e", tfjsonpath.New("internal_address")),
		}
	}
	inPlace := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
		plancheck.ExpectResourceAction("egress_proxy.e2e", plancheck.ResourceActionUpdate),
		noSecretInPlan{secrets: []string{password(1), password(2)}},
	}}
	var applyStarted time.Time
	startClock := func() { applyStarted = time.Now() }
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				Config:            config(`["allowed.test"]`, 1),
				ConfigStateChecks: unchanged(),
				Check: resource.ComposeTestCheckFunc(checkNoSecretInState(password(1)), checkProxyServes(t, []proxyExpectation{
					{"http://allowed.test/", credentials(1), "000", "200"},
					{"https://allowed.test/", credentials(1), "200", "200"},
					{"http://denied.test/", credentials(1), "000", "403"},
					{"https://denied.test/", credentials(1), "403", "000"},
					{"http://allowed.test/", "", "000", "407"},
					{"http://allowed.test/", e2eUser + ":wrong-password", "000", "407"},
				})),
			},
			{
				// A new allow-list is applied to the running proxy: same id, same address, no boot.
				PreConfig:         startClock,
				Config:            config(`["denied.test"]`, 1),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: unchanged(),
				Check: resource.ComposeTestCheckFunc(logElapsed(t, "allow-list swap", &applyStarted), checkProxyServes(t, []proxyExpectation{
					{"http://denied.test/", credentials(1), "000", "200"},
					{"http://allowed.test/", credentials(1), "000", "403"},
					{"https://allowed.test/", credentials(1), "403", "000"},
				})),
			},
			{
				// A new password_wo_version rotates the password in place.
				PreConfig:         startClock,
				Config:            config(`["denied.test"]`, 2),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: unchanged(),
				Check: resource.ComposeTestCheckFunc(logElapsed(t, "password rotation", &applyStarted), checkNoSecretInState(password(2)),
					checkProxyServes(t, []proxyExpectation{
						{"http://denied.test/", credentials(2), "000", "200"},
						{"http://denied.test/", credentials(1), "000", "407"},
					})),
			},
			{
				// A rule set in report mode for these clients: what it lists is allowed, what it does not list
				// is forwarded anyway (and logged as would_deny), in place.
				Config:            config(`["denied.test"]`, 2, e2eRuleSet("report")),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: unchanged(),
				Check: checkProxyServes(t, []proxyExpectation{
					{"http://allowed.test/", credentials(2), "000", "200"},
					{"http://denied.test/", credentials(2), "000", "200"},
				}),
			},
			{
				// The same rule set enforced: what it does not list is refused, though allowed_destinations
				// lists it (the rule set, not the fallback, judges these clients).
				Config:            config(`["denied.test"]`, 2, e2eRuleSet("enforce")),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: unchanged(),
				Check: checkProxyServes(t, []proxyExpectation{
					{"http://allowed.test/", credentials(2), "000", "200"},
					{"http://denied.test/", credentials(2), "000", "403"},
				}),
			},
		},
	})
	trace, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("reading the trace log: %v", err)
	}
	logged := withoutConfigEchoes(string(trace))
	// The provider's own TRACE lines must be there, or the search below would prove nothing.
	if !strings.Contains(logged, "ApplyResourceChange") {
		t.Fatal("the trace log holds no provider RPC: the search for the password would prove nothing")
	}
	for _, secret := range []string{password(1), password(2)} {
		if strings.Contains(logged, secret) {
			t.Errorf("the password %q appears in the TRACE log %s", secret, logFile)
		}
	}
}

// withoutConfigEchoes drops the test harness's echo of each step's configuration source, in which this test
// writes the password as a literal: those lines are neither the CLI's nor the provider's. An echo is the
// "Setting Terraform configuration" line and the indented lines after it.
func withoutConfigEchoes(log string) string {
	var out strings.Builder
	echo := false
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(line, "Setting Terraform configuration"):
			echo = true
			continue
		case echo && strings.HasPrefix(line, "  "):
			continue
		}
		echo = false
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.String()
}

// logElapsed reports how long the apply of a step took, from its PreConfig to its first check.
func logElapsed(t *testing.T, what string, started *time.Time) resource.TestCheckFunc {
	return func(*terraform.State) error {
		t.Logf("%s: apply returned %v after it started, rules enforced", what, time.Since(*started).Round(100*time.Millisecond))
		return nil
	}
}

func checkNoSecretInState(secret string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		for name, rs := range s.RootModule().Resources {
			for key, value := range rs.Primary.Attributes {
				if strings.Contains(value, secret) {
					return fmt.Errorf("state of %s holds the password in %s", name, key)
				}
			}
		}
		return nil
	}
}

// noSecretInPlan fails when any of the secrets appears in what the plan records of values: prior state,
// planned values, resource and output changes, variables. Its configuration section is left out: it echoes
// the source, where this test writes the password as a literal (a user would pass an ephemeral variable).
type noSecretInPlan struct{ secrets []string }

func (c noSecretInPlan) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	values := *req.Plan
	values.Config = nil
	plan, err := json.Marshal(values)
	if err != nil {
		resp.Error = err
		return
	}
	for _, secret := range c.secrets {
		if strings.Contains(string(plan), secret) {
			resp.Error = fmt.Errorf("the plan holds the password %q", secret)
			return
		}
	}
}

// e2eRuleSet is a rule set for every client of the e2e proxy that allows allowed.test alone, in mode.
func e2eRuleSet(mode string) string {
	return fmt.Sprintf(`{ name = "e2e", clients = { source_cidrs = ["198.18.0.0/24"] }, destinations = ["allowed.test"], ports = [443], mode = %q }`, mode)
}
