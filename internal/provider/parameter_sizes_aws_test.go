package provider

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// An aws proxy's config is packed into at most nine Standard SSM parameters (issue 35, item 7: before, one
// parameter of 8 KB held it, the schema's 500 destinations planned and create failed with
// ValidationException). The largest settings a plan admits on aws (500 destinations of the longest form, the
// client ranges one security group takes, every other list at its limit, auth and a 16 KB TLS chain) plan;
// 500 random names of 253 characters, which nothing compresses, fail the plan on allowed_destinations,
// saying how far the config is over and about how many destinations to remove. Nothing reaches AWS.
func TestAccProxyAWS_parameterSizesAtPlan(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	quoted := func(values []string) string {
		q := make([]string, len(values))
		for i, v := range values {
			q[i] = strconv.Quote(v)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	config := func(body string) string {
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-long"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
  }
%s
}
`, fake.Subnets(awsTestRegion)[0].ID, body))
	}
	rnd := rand.New(rand.NewPCG(7, 8))
	label := func(n int) string {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		return string(b)
	}
	var random, longest, typical, clients, private, ports []string
	for i := range proxyconf.MaxAllowedDestinations {
		random = append(random, "."+label(63)+"."+label(63)+"."+label(63)+"."+label(61))
		longest = append(longest, fmt.Sprintf(".d%03d%s.%s.%s.%s", i, strings.Repeat("a", 59), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("e", 61)))
	}
	for i := range 10 {
		typical = append(typical, fmt.Sprintf("api%02d.example%02d.com", i, i))
	}
	// As many ranges of each family as one security group takes by default (awsClientRules).
	for i := range 60 {
		clients = append(clients, fmt.Sprintf("198.151.100.%d/32", 100+i), fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789a:%04x/128", 0xb000+i))
	}
	for i := range proxyconf.MaxAllowedPrivateCIDRs {
		private = append(private, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789b:%04x/128", 0xc000+i))
		ports = append(ports, strconv.Itoa(60000+i))
	}
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	for {
		more, _ := testutil.SelfSignedPEM(t, "ca.test")
		if len(cert)+len(more) > proxyconf.MaxPEMBytes {
			break
		}
		cert += more
	}
	largest := fmt.Sprintf(`  allowed_client_cidrs  = %s
  allowed_destinations  = %s
  allowed_private_cidrs = %s
  allowed_ports         = [%s]
  auth                  = { username = %q, password = "correct-horse-battery" }
  tls                   = { certificate_pem = %s, private_key_pem = %s }`,
		quoted(clients), quoted(longest), quoted(private), strings.Join(ports, ", "), strings.Repeat("u", 64), strconv.Quote(cert), strconv.Quote(key))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:   config(`  allowed_client_cidrs = ["10.0.0.0/8"]` + "\n  allowed_destinations = " + quoted(random)),
				PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)allowed_destinations.*config,\s+compressed,\s+takes\s+\d+\s+characters.*hold\s+36864.*` +
					`allowed_destinations\s+take\s+about\s+\d+\s+\(500\s+entries.*remove\s+about\s+\d+\s+of\s+them`),
			},
			{Config: config(largest), PlanOnly: true, ExpectNonEmptyPlan: true},
			{Config: config(`  allowed_client_cidrs = ["10.0.0.0/8"]` + "\n  allowed_destinations = " + quoted(typical)), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}
