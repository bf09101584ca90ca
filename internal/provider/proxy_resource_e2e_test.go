package provider

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
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
	var hostnames strings.Builder
	for _, n := range names {
		fmt.Fprintf(&hostnames, "<hostname>%s</hostname>", n)
	}
	entry := fmt.Sprintf("<host ip='%s'>%s</host>", e2eGateway, hostnames.String())
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
	args := []string{"netns", "exec", e2eNetns(), "curl", "-sS", "-k", "-o", "/dev/null", "--max-time", "20",
		"-w", "%{http_connect} %{http_code}", "-x", "http://" + proxy}
	if credentials != "" {
		args = append(args, "--proxy-user", credentials)
	}
	out, _ := exec.Command("ip", append(args, url)...).Output() // curl exits non-zero on a refused CONNECT
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("curl via %s to %s printed %q", proxy, url, out)
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

func TestAccProxyKVM_bootedProxyServesOnlyAllowedDestinations(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := os.Getenv("EGRESS_TEST_IMAGE")
	if image == "" {
		t.Fatal("EGRESS_TEST_IMAGE must name the proxy image: `make image` builds it, `make testacc` sets it")
	}
	startUpstreams(t)
	addDNSHosts(t, uri, "allowed.test", "denied.test")
	owner := "e2e-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	config := func(destinations string) string {
		return kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "e2e" {
  kvm = {
    image_file = %q
    memory_mib = 512
  }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = %s
  auth = {
    username = %q
    password = %q
  }
  timeouts {
    create = "20m"
  }
}
`, image, destinations, e2eUser, e2ePass)
	}
	good := e2eUser + ":" + e2ePass
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				Config: config(`["allowed.test"]`),
				Check: checkProxyServes(t, []proxyExpectation{
					{"http://allowed.test/", good, "000", "200"},
					{"https://allowed.test/", good, "200", "200"},
					{"http://denied.test/", good, "000", "403"},
					{"https://denied.test/", good, "403", "000"},
					{"http://allowed.test/", "", "000", "407"},
					{"http://allowed.test/", e2eUser + ":wrong-password", "000", "407"},
				}),
			},
			{
				// A new allow-list replaces the proxy, and the new proxy enforces the new list.
				Config: config(`["denied.test"]`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.e2e", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: checkProxyServes(t, []proxyExpectation{
					{"http://denied.test/", good, "000", "200"},
					{"http://allowed.test/", good, "000", "403"},
				}),
			},
		},
	})
}
