package provider

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Rule sets, the deny list and the client CA that are wrong are refused at plan time, each error naming the
// attribute at fault inside the rule set, before the backend is called.
func TestAccProxy_invalidPolicyRejectedAtPlan(t *testing.T) {
	const base = "  allowed_client_cidrs = [\"10.0.0.0/8\"]\n  kvm = {}\n"
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	tls := func(extra string) string {
		return "  tls = { certificate_pem = " + strconv.Quote(cert) + ", private_key_pem = " + strconv.Quote(key) + extra + " }\n"
	}
	ruleSets := func(sets ...string) string { return "  rule_sets = [\n    " + joinLines(sets) + "\n  ]\n" }
	tests := map[string]refusedConfig{
		"duplicate name": {base + ruleSets(
			`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] } },`,
			`{ name = "ci", clients = { source_cidrs = ["10.2.0.0/16"] } },`),
			`Duplicate rule set name.*Attribute rule_sets\[1\].name: "ci" already names rule_sets\[0\]`},
		"user without auth": {base + ruleSets(`{ name = "ci", clients = { users = ["builder"] } },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.users: rule set "ci" names user "builder", but the proxy has no users`},
		"user auth does not declare": {base + "  auth = { username = \"deployer\", password = \"longenough\" }\n" + ruleSets(
			`{ name = "ci", clients = { users = ["builder"] } },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.users: rule set "ci" names user "builder", who is not one of the proxy's users \(deployer\)`},
		"subjects without client ca": {base + tls("") + ruleSets(`{ name = "svc", clients = { certificate_subjects = ["billing"] } },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.certificate_subjects: rule set "svc" \(mode enforce\) matches certificate subjects, but the proxy asks for no client certificate`},
		"report mode on subjects without tls": {base + ruleSets(`{ name = "svc", clients = { certificate_subjects = ["billing"] }, mode = "report" },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.certificate_subjects: rule set "svc" \(mode report\)`},
		"hidden by a wider range": {base + ruleSets(
			`{ name = "all", clients = { source_cidrs = ["10.0.0.0/8"] } },`,
			`{ name = "team", clients = { source_cidrs = ["10.1.0.0/16"], users = ["x"] } },`),
			`Rule set can never match.*Attribute rule_sets\[1\].clients: every client it names is matched first by rule_sets\[0\] \("all"\)`},
		"hidden by the same users": {base + "  auth = { username = \"ci\", password = \"longenough\" }\n" + ruleSets(
			`{ name = "a", clients = { source_cidrs = ["10.3.0.0/16"] } },`,
			`{ name = "b", clients = { users = ["ci"], source_cidrs = ["10.3.0.0/16", "10.4.0.0/16"] } },`,
			`{ name = "c", clients = { users = ["ci"], source_cidrs = ["10.4.0.0/16"] } },`),
			`Rule set can never match.*Attribute rule_sets\[2\].clients:.*rule_sets\[1\] \("b"\)`},
		// With auth, every client that gets through logs in as one of its users: a rule set of all of them takes
		// every client, whatever a later one adds.
		"hidden by every user": {base + "  auth = { username = \"ci\", password = \"longenough\" }\n" + ruleSets(
			`{ name = "a", clients = { users = ["ci"] } },`,
			`{ name = "b", clients = { source_cidrs = ["10.3.0.0/16"] } },`),
			`Rule set can never match.*Attribute rule_sets\[1\].clients:.*rule_sets\[0\] \("a"\)`},
		"no clients": {base + ruleSets(`{ name = "ci", clients = {} },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients: rule set "ci" names no clients`},
		"mode unknown": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] }, mode = "audit" },`),
			`Invalid Attribute Value Match.*Attribute rule_sets\[0\].mode value must be one of: \["enforce" "report"\], got: "audit"`},
		"name uppercase": {base + ruleSets(`{ name = "CI", clients = { source_cidrs = ["10.1.0.0/16"] } },`),
			`Invalid rule set name.*Attribute rule_sets\[0\].name: rule set name "CI"`},
		"source not canonical": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["10.1.0.1/16"] } },`),
			`Invalid client CIDR.*Attribute rule_sets\[0\].clients.source_cidrs\[Value\("10.1.0.1/16"\)\]:.*write 10.1.0.0/16`},
		"destination wildcard": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] }, destinations = ["*.example.com"] },`),
			`Invalid destination.*Attribute rule_sets\[0\].destinations\[Value\("\*.example.com"\)\]`},
		"destination octal": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] }, destinations = ["0177.0.0.1"] },`),
			`Invalid destination.*Attribute rule_sets\[0\].destinations\[Value\("0177.0.0.1"\)\]:.*not an IP address`},
		"port zero": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] }, ports = [0] },`),
			`Invalid port.*Attribute rule_sets\[0\].ports\[Value\(0\)\]`},
		"denied destination with space": {base + "  denied_destinations = [\"a.com deny\"]\n",
			`Invalid destination.*Attribute denied_destinations\[Value\("a.com deny"\)\]`},
		"user not among several": {base + "  auth = { users = [{ username = \"deployer\", password_wo = \"longenough\", password_wo_version = 1 }, { username = \"auditor\", password_wo = \"longenough\", password_wo_version = 1 }] }\n" +
			ruleSets(`{ name = "ci", clients = { users = ["builder"] } },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.users: rule set "ci" names user "builder", who is not one of the proxy's users \(deployer, auditor\)`},
		"source outside the allowed clients": {base + ruleSets(`{ name = "ci", clients = { source_cidrs = ["192.168.0.0/16"] } },`),
			`Invalid rule set clients.*Attribute rule_sets\[0\].clients.source_cidrs: rule set "ci": source range 192.168.0.0/16 is not within allowed_client_cidrs`},
		"client ca not a ca": {base + tls(", client_ca_pem = "+strconv.Quote(cert)),
			`Invalid client CA.*Attribute tls.client_ca_pem: client CA, certificate 1 \("proxy.test"\) is not a CA certificate`},
		"crl without client ca": {base + tls(", client_crl_pem = \"x\""),
			`Invalid Attribute Combination.*Attribute "tls.client_ca_pem" must be specified when "tls.client_crl_pem" is specified`},
		// Each list within its own bound, together over the proxy's: refused at plan, not after approval.
		"destinations together": {base + "  allowed_destinations = " + quotedList(300, "a%d.example.com") + "\n" + ruleSets(
			`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/16"] }, destinations = `+quotedList(201, "b%d.example.com")+` },`),
			`Policy too large.*Attribute rule_sets: at most 500 destinations in allowed and denied destinations and every rule set together, got 501`},
		"client ranges together": {"  kvm = {}\n  allowed_client_cidrs = " + quotedList(200, "10.%d.0.0/16") + "\n" + ruleSets(
			`{ name = "ci", clients = { source_cidrs = ["10.1.0.0/24"] } },`),
			`Policy too large.*Attribute rule_sets: at most 200 client ranges in allowed_client_cidrs and every rule set together, got 201`},
	}
	expectRefused(t, tests)
}

// quotedList is an HCL list of n strings, format filled with 0 to n-1.
func quotedList(n int, format string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = strconv.Quote(fmt.Sprintf(format, i))
	}
	return "[" + strings.Join(items, ", ") + "]"
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n    "
		}
		out += l
	}
	return out
}

// Rule sets, their mode, the deny list and the client CA change in place, reach the backend as written (rule
// sets in order), and leave nothing to plan afterwards; a change made behind Terraform's back shows as drift.
func TestAccProxy_ruleSetsChangeInPlace(t *testing.T) {
	mem := newMemoryBackends()
	sameID := statecheck.CompareValue(compare.ValuesSame())
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	clientCAs := []string{testutil.NewCA(t).RootPEM, testutil.NewCA(t).RootPEM}
	type policy struct {
		mode, destination, denied string
		ca                        int
	}
	config := func(p policy) string {
		return proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["example.com"]
  auth                 = { username = "ci", password = "longenough" }
  tls                  = { certificate_pem = %q, private_key_pem = %q, client_ca_pem = %q }
  denied_destinations  = [%q]
  rule_sets = [
    { name = "ci", clients = { users = ["ci"], source_cidrs = ["10.9.0.0/16"] }, destinations = [".github.com"], ports = [443, 22] },
    { name = "team", clients = { source_cidrs = ["10.1.0.0/16"] }, destinations = [%q], mode = %q },
    { name = "billing", clients = { certificate_subjects = ["billing"] }, destinations = ["pay.example.com"] },
  ]
`, cert, key, clientCAs[p.ca], p.denied, p.destination, p.mode))
	}
	policies := []policy{
		{"report", "api.example.com", "bad.example.com", 0},
		{"report", "pkg.example.com", "bad.example.com", 0},    // a rule set's destinations
		{"enforce", "pkg.example.com", "bad.example.com", 0},   // its mode
		{"enforce", "pkg.example.com", "worse.example.com", 0}, // the deny list
		{"enforce", "pkg.example.com", "worse.example.com", 1}, // the client CA
	}
	var steps []resource.TestStep
	for i, p := range policies {
		step := resource.TestStep{
			Config:            config(p),
			ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
			Check: resource.ComposeTestCheckFunc(checkBackendHoldsOne(mem, kvm.Kind), checkBackendPolicy(mem, kvm.Kind, clientCAs[p.ca], []string{p.denied}, []proxyconf.RuleSet{
				{Name: "ci", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.9.0.0/16"}, Users: []string{"ci"}},
					Destinations: []string{".github.com"}, Ports: []int{22, 443}, Mode: proxyconf.RuleSetEnforce},
				{Name: "team", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}},
					Destinations: []string{p.destination}, Ports: []int{443}, Mode: proxyconf.RuleSetMode(p.mode)},
				{Name: "billing", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"billing"}},
					Destinations: []string{"pay.example.com"}, Ports: []int{443}, Mode: proxyconf.RuleSetEnforce},
			})),
			// The defaults of ports and mode are in the state, and a second plan finds nothing to do.
			ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		}
		if i > 0 {
			step.ConfigPlanChecks.PreApply = []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}
		}
		steps = append(steps, step)
	}
	last := policies[len(policies)-1]
	steps = append(steps, resource.TestStep{
		// Rule sets and a deny list changed behind Terraform's back show in the plan, which puts them right.
		PreConfig: func() {
			for _, inst := range mem[kvm.Kind].Instances() {
				changed := *inst.Proxy
				changed.RuleSets, changed.DeniedDestinations = changed.RuleSets[:1], nil
				inst.Proxy = &changed
				mem[kvm.Kind].Put(inst)
			}
		},
		Config:            config(last),
		ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}},
		ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
		Check: func(s *terraform.State) error {
			held := mem[kvm.Kind].Instances()
			if len(held) != 1 || len(held[0].Proxy.RuleSets) != 3 || len(held[0].Proxy.DeniedDestinations) != 1 {
				return fmt.Errorf("after the apply the backend holds %+v, want the three rule sets and the deny list back", held)
			}
			return nil
		},
	})
	steps = append(steps, resource.TestStep{
		// Removing every rule set, the deny list and the client CA also changes in place, back to the one allow-list.
		Config: proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["example.com"]
  auth                 = { username = "ci", password = "longenough" }
  tls                  = { certificate_pem = %q, private_key_pem = %q }
`, cert, key)),
		ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}},
		ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
		Check: resource.ComposeTestCheckFunc(checkBackendPolicy(mem, kvm.Kind, "", nil, nil), func(*terraform.State) error {
			if n := mem[kvm.Kind].Calls("reconfigure"); n != len(policies)+1 {
				return fmt.Errorf("reconfigure was called %d times, want %d (one per changed apply)", n, len(policies)+1)
			}
			return nil
		}),
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps:                    steps,
	})
}

// checkBackendPolicy checks the client CA, the deny list and the rule sets every proxy of the backend enforces.
func checkBackendPolicy(mem memoryBackends, kind backend.Kind, clientCA string, denied []string, ruleSets []proxyconf.RuleSet) resource.TestCheckFunc {
	return func(*terraform.State) error {
		held := mem[kind].Instances()
		if len(held) == 0 {
			return fmt.Errorf("the %s backend holds no proxy to check the policy of", kind)
		}
		for _, inst := range held {
			if inst.Proxy == nil {
				return fmt.Errorf("%s reports no settings", inst.ID)
			}
			if !slices.Equal(inst.Proxy.DeniedDestinations, denied) {
				return fmt.Errorf("%s denies %v, want %v", inst.ID, inst.Proxy.DeniedDestinations, denied)
			}
			if !reflect.DeepEqual(inst.Proxy.RuleSets, ruleSets) {
				return fmt.Errorf("%s enforces rule sets\n%+v\nwant\n%+v", inst.ID, inst.Proxy.RuleSets, ruleSets)
			}
			if inst.Proxy.TLS == nil || inst.Proxy.TLS.ClientCAPEM != clientCA {
				return fmt.Errorf("%s has TLS %+v, want the client CA %.60q", inst.ID, inst.Proxy.TLS, clientCA)
			}
		}
		return nil
	}
}
