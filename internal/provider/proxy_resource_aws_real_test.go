package provider

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// The aws lifecycle on a real account, which the fake cannot stand in for: the Debian image running the
// user-data and the agent, the instance role reading its parameters through KMS, IMDSv2, the security group
// and the Elastic IP on the internet, and billing. It runs when EGRESS_TEST_AWS_SUBNET (a public subnet),
// EGRESS_TEST_AWS_INSTANCE_PROFILE (whose role may read /egress-proxy/* as the docs say),
// EGRESS_TEST_AWS_CLIENT_CIDR (this machine's public address, /32), AWS_REGION and credentials are set, and
// skips with one line otherwise. It has not run yet: the backend stays a preview until it has.
//
//	AWS_REGION=eu-west-1 AWS_PROFILE=sandbox EGRESS_TEST_AWS_SUBNET=subnet-0123456789abcdef0 \
//	EGRESS_TEST_AWS_INSTANCE_PROFILE=egress-proxy EGRESS_TEST_AWS_CLIENT_CIDR=$(curl -s https://checkip.amazonaws.com)/32 \
//	make testacc TESTARGS='-run TestAccProxyAWS_realAccount'
//
// It makes, for about ten minutes, one t3.micro instance, its security group, an Elastic IP and four
// parameters, and deletes them at the end.
const realAWSSkip = "real AWS account not configured: set AWS_REGION, credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID), EGRESS_TEST_AWS_SUBNET, " +
	"EGRESS_TEST_AWS_INSTANCE_PROFILE and EGRESS_TEST_AWS_CLIENT_CIDR to run it; it bills a few cents"

func TestAccProxyAWS_realAccount(t *testing.T) {
	region, subnet, profile, client := os.Getenv("AWS_REGION"), os.Getenv("EGRESS_TEST_AWS_SUBNET"), os.Getenv("EGRESS_TEST_AWS_INSTANCE_PROFILE"), os.Getenv("EGRESS_TEST_AWS_CLIENT_CIDR")
	hasCredentials := os.Getenv("AWS_PROFILE") != "" || os.Getenv("AWS_ACCESS_KEY_ID") != ""
	if region == "" || subnet == "" || profile == "" || client == "" || !hasCredentials {
		t.Skip(realAWSSkip)
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	owner := "acc-" + hex.EncodeToString(suffix)
	config := fmt.Sprintf(`
provider "egress" {
  owner = %q
  aws   = { region = %q }
}
resource "egress_proxy" "real" {
  name = %q
  aws = {
    subnet_id            = %q
    iam_instance_profile = %q
    static_egress_ip     = true
    wait_for_proxy       = true
  }
  allowed_client_cidrs = [%q]
  allowed_destinations = ["checkip.amazonaws.com"]
  timeouts             = { create = "15m" }
}
`, owner, region, owner, subnet, profile, client)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{{
			Config: config,
			Check: func(s *terraform.State) error {
				rs := s.RootModule().Resources["egress_proxy.real"].Primary
				egress := rs.Attributes["egress_address"]
				if net.ParseIP(egress) == nil {
					return fmt.Errorf("egress_address %q is not an address", egress)
				}
				// Through the proxy, the destination sees the Elastic IP.
				proxy, err := url.Parse("http://" + net.JoinHostPort(rs.Attributes["ingress_address"], rs.Attributes["port"]))
				if err != nil {
					return err
				}
				c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
				resp, err := c.Get("https://checkip.amazonaws.com")
				if err != nil {
					return fmt.Errorf("through the proxy: %w", err)
				}
				defer func() { _ = resp.Body.Close() }()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("through the proxy: %s", resp.Status)
				}
				return nil
			},
		}},
	})
}
