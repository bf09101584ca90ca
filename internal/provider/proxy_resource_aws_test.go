package provider

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// The aws acceptance tests run the real provider, the real AWS SDK clients and the CLI against the EC2 and
// SSM fake started here, on loopback, with the static credentials the fake checks.

const awsTestRegion = "eu-west-1"

// awsFake starts the fake with the documented permissions (withDocumentedAWSPolicies).
func awsFake(t *testing.T, opts ec2fake.Options) *ec2fake.Server {
	t.Helper()
	return ec2fake.New(t, withDocumentedAWSPolicies(t, opts))
}

func awsProviderFactories() map[string]func() (tfprotov6.ProviderServer, error) {
	return gcpProviderFactories() // the real backends, each built from its provider block
}

// awsConfig is the provider block that reaches the fake with its own credentials (or secretKey, when set),
// followed by resources.
func awsConfig(t *testing.T, fake *ec2fake.Server, secretKey, resources string) string {
	t.Helper()
	return awsProviderConfig(t, fake, "team-a", secretKey, "") + resources
}

// awsProviderConfig is the provider block of owner that reaches the fake, with more attributes of the aws
// block.
func awsProviderConfig(t *testing.T, fake *ec2fake.Server, owner, secretKey, moreAWS string) string {
	t.Helper()
	creds, err := fake.Credentials().Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if secretKey == "" {
		secretKey = creds.SecretAccessKey
	}
	return fmt.Sprintf(`
provider "egress" {
  owner = %q
  aws = {
    region     = %q
    access_key = %q
    secret_key = %q
    endpoints  = { ec2 = %[5]q, ssm = %[5]q, sts = %[5]q, servicequotas = %[5]q, iam = %[5]q, logs = %[5]q, elasticloadbalancing = %[5]q }
    %[6]s
  }
}
`, owner, awsTestRegion, creds.AccessKeyID, secretKey, fake.URL(), moreAWS)
}

// awsTestBackend reaches the fake as the provider does, for what a test does behind Terraform's back:
// proxies no state holds, orphans deleted by the id their list gave.
func awsTestBackend(t *testing.T, fake *ec2fake.Server) *aws.Backend {
	t.Helper()
	creds, err := fake.Credentials().Retrieve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	region := aws.RegionConfig{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey, EC2Endpoint: fake.URL(), SSMEndpoint: fake.URL(), STSEndpoint: fake.URL(),
		ServiceQuotasEndpoint: fake.URL(), IAMEndpoint: fake.URL(), LogsEndpoint: fake.URL(), ELBEndpoint: fake.URL()}
	b, err := aws.New(aws.Config{DefaultRegion: awsTestRegion, Regions: map[string]aws.RegionConfig{awsTestRegion: region}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awsGuestConfig is the proxy's config as its guest reads it: the config parameter's manifest and its parts.
func awsGuestConfig(fake *ec2fake.Server, name string) (awsguest.Config, error) {
	value := func(param string) (string, bool) {
		p, ok := fake.Parameter(awsTestRegion, awsguest.ParameterPath(name, param))
		return p.Value, ok
	}
	manifest, ok := value(awsguest.ParameterConfig)
	if !ok {
		return awsguest.Config{}, fmt.Errorf("no config parameter")
	}
	c, _, err := awsguest.LoadConfig(manifest, func(i int) (string, bool) { return value(awsguest.PartName(awsguest.ParameterConfig, i)) })
	return c, err
}

func awsProxy(fake *ec2fake.Server, labels, destination, instanceType string) string {
	return fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-acc"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
    instance_type        = %q
    static_egress_ip     = true
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [%q]
  labels               = { %s }
}
`, fake.Subnets(awsTestRegion)[0].ID, instanceType, destination, labels)
}

// liveInstances are the fake's instances that are not terminated.
func liveInstances(fake *ec2fake.Server) []ec2fake.Instance {
	var live []ec2fake.Instance
	for _, in := range fake.Instances(awsTestRegion) {
		if in.State != "terminated" {
			live = append(live, in)
		}
	}
	return live
}

func TestAccProxyAWS_lifecycle(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	var eip string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             awsNothingLeft(fake),
		Steps: []resource.TestStep{
			{
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "net"`, ".example.com", "t3.micro")),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("id"), knownvalue.StringExact("aws/eu-west-1/egress-acc")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("aws").AtMapKey("ami"), knownvalue.StringExact(ec2fake.DebianAMI(0, "amd64"))),
				},
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					addrs := fake.Addresses(awsTestRegion)
					if len(addrs) != 1 || rs.Attributes["egress_address"] != addrs[0].PublicIP {
						return fmt.Errorf("egress_address %q is not the Elastic IP %v", rs.Attributes["egress_address"], addrs)
					}
					eip = addrs[0].PublicIP
					live := liveInstances(fake)
					if len(live) != 1 || live[0].Tags["team"] != "net" || live[0].Metadata.HTTPTokens != "required" || live[0].Metadata.HopLimit != 1 {
						return fmt.Errorf("instances %+v: want one, tagged team=net, with IMDSv2 required and a hop limit of 1", live)
					}
					return nil
				},
			},
			{
				Config:   awsConfig(t, fake, "", awsProxy(fake, `team = "net"`, ".example.com", "t3.micro")),
				PlanOnly: true,
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
				SkipFunc:        skipStepBelow(t, tfversion.Version1_12_0),
				ImportPlanChecks: resource.ImportPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionNoop),
				}},
			},
			{
				// Labels change in place: the same instance, the new tag.
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "sec"`, ".example.com", "t3.micro")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					if live := liveInstances(fake); len(live) != 1 || live[0].Tags["team"] != "sec" {
						return fmt.Errorf("after the update: %+v, want one instance tagged team=sec", live)
					}
					return nil
				},
			},
			{
				// The rules change in place: the config parameter carries the new allow-list, applied by the
				// guest before the apply returns.
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "sec"`, "api.example.org", "t3.micro")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					if c, err := awsGuestConfig(fake, "egress-acc"); err != nil || !strings.Contains(c.SquidConf, "api.example.org") {
						return fmt.Errorf("the config parameters do not carry the new allow-list (%w)", err)
					}
					if n := len(liveInstances(fake)); n != 1 {
						return fmt.Errorf("%d instances after an in-place change, want 1", n)
					}
					return nil
				},
			},
			{
				// A new instance type replaces the proxy; the Elastic IP allocated under its name is kept and
				// taken by the new instance: the egress address does not change.
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "sec"`, "api.example.org", "t3.small")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					if rs.Attributes["egress_address"] != eip || len(fake.Addresses(awsTestRegion)) != 1 {
						return fmt.Errorf("after the replacement the proxy egresses from %q with %d Elastic IPs, want %s and 1", rs.Attributes["egress_address"], len(fake.Addresses(awsTestRegion)), eip)
					}
					return nil
				},
			},
			{
				// The instance terminated behind Terraform's back: the next plan recreates it, with the address.
				PreConfig: func() {
					live := liveInstances(fake)
					if len(live) != 1 {
						t.Fatalf("%d instances, want 1 to terminate", len(live))
					}
					fake.SetInstanceState(awsTestRegion, live[0].ID, "terminated")
				},
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "sec"`, "api.example.org", "t3.small")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate),
				}},
				Check: func(s *terraform.State) error {
					if rs := s.RootModule().Resources["egress_proxy.test"].Primary; rs.Attributes["egress_address"] != eip || len(liveInstances(fake)) != 1 {
						return fmt.Errorf("the recreated proxy egresses from %q, want %s", rs.Attributes["egress_address"], eip)
					}
					return nil
				},
			},
		},
	})
}

func TestAccProxyAWS_errors(t *testing.T) {
	for name, tc := range map[string]struct {
		opts      ec2fake.Options
		secretKey string
		want      string
	}{
		"instance limit":   {ec2fake.Options{MaxInstances: -1}, "", `(?s)limit reached.*InstanceLimitExceeded.*Service Quotas`},
		"wrong credential": {ec2fake.Options{}, "not-the-secret", `(?s)refused by the backend.*(AuthFailure|SignatureDoesNotMatch|InvalidSignature)`},
	} {
		t.Run(name, func(t *testing.T) {
			fake := awsFake(t, tc.opts)
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: awsProviderFactories(),
				Steps: []resource.TestStep{{
					Config:      awsConfig(t, fake, tc.secretKey, awsProxy(fake, `team = "net"`, ".example.com", "t3.micro")),
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
			if n := len(liveInstances(fake)); n != 0 {
				t.Fatalf("%d instances left by a refused create", n)
			}
			// The instance limit refuses the launch after the group and the parameters were made: they are
			// given back (issue 35, item 14).
			for _, g := range fake.SecurityGroups(awsTestRegion) {
				if strings.HasPrefix(g.Name, "egress-proxy-") {
					t.Errorf("security group %s left by a refused create", g.Name)
				}
			}
			for _, p := range fake.Parameters(awsTestRegion) {
				if strings.HasPrefix(p.Name, awsguest.ParameterPrefix) {
					t.Errorf("parameter %s left by a refused create", p.Name)
				}
			}
		})
	}
}

// Proxies of the owner that no state holds (made here straight through the backend, as a crashed apply
// would leave them) are listed by egress_proxy_orphans, a region that cannot be reached is reported beside
// them, and egress_backends reports the reachable region healthy in a check block.
func TestAccProxyAWS_orphansAndHealth(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	b := awsTestBackend(t, fake)
	var ids []string
	for i := range 2 {
		uid := fmt.Sprintf("orphan-%d", i)
		inst, err := b.Create(t.Context(), backend.Spec{
			Name: backend.NameFromUID(uid), UID: uid, Owner: "team-a",
			Placement: backend.Placement{Backend: aws.Kind, Target: awsTestRegion, Options: &aws.Options{
				SubnetID: fake.Subnets(awsTestRegion)[0].ID, IAMInstanceProfile: "egress-proxy"}},
			Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID.String())
	}
	sort.Strings(ids)
	fake.SetReachable("us-east-1", false)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{{
			Config: awsProviderConfig(t, fake, "team-a", "", `regions = { "us-east-1" = {} }`) + fmt.Sprintf(`
data "egress_proxy_orphans" "all" {
  backends = ["aws"]
  min_age  = "0s"
}
data "egress_backends" "all" {}
check "aws_reachable" {
  assert {
    condition     = anytrue([for b in data.egress_backends.all.backends : b.target == %[1]q && b.healthy])
    error_message = "the AWS region is not healthy"
  }
}
`, awsTestRegion),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(ids[0])}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(ids[1])}),
				})),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("errors"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.StringRegexp(regexp.MustCompile(`us-east-1`)),
				})),
				// The check block's assertion holds (a failing one is only a warning, so the state says it).
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"target": knownvalue.StringExact(awsTestRegion), "healthy": knownvalue.Bool(true),
						"reason": knownvalue.StringExact(backend.HealthHealthy), "details": knownvalue.MapPartial(map[string]knownvalue.Check{
							"quota_source": knownvalue.StringExact("service_quotas"), "quota_on_demand_vcpus": knownvalue.StringExact("32"),
							"vcpus_in_use": knownvalue.StringExact("4"),
						})}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"target": knownvalue.StringExact("us-east-1"), "healthy": knownvalue.Bool(false)}),
				})),
			},
		}},
	})
}

// awsGCCLIFixture makes, behind Terraform's back, three proxies of one owner and one of another on the EC2
// fake, for the CLI garbage-collection test.
func awsGCCLIFixture(t *testing.T) gcCLIFixture {
	fake := awsFake(t, ec2fake.Options{})
	b := awsTestBackend(t, fake)
	owner, other := "acc-gc-aws", "acc-gc-other"
	var made []backend.Instance
	for i, o := range []string{owner, owner, owner, other} {
		uid := fmt.Sprintf("gc-aws-%d", i)
		inst, err := b.Create(t.Context(), backend.Spec{
			Name: backend.NameFromUID(uid), UID: uid, Owner: o, Labels: map[string]string{"team": "ci"},
			Placement: backend.Placement{Backend: aws.Kind, Target: awsTestRegion, Options: &aws.Options{
				SubnetID: fake.Subnets(awsTestRegion)[0].ID, IAMInstanceProfile: "egress-proxy"}},
			Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{".example.com"}, AllowedPorts: []int{443}},
		})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, inst)
	}
	return gcCLIFixture{
		providerBlock: awsProviderConfig(t, fake, owner, "", ""), b: b, kept: made[0], orphans: made[1:3], foreign: made[3],
		leftovers: func(t *testing.T, inst backend.Instance) []string {
			var left []string
			if fake.RunsInstanceNamed(awsTestRegion, inst.Name) {
				left = append(left, "instance "+inst.Name)
			}
			for _, g := range fake.SecurityGroups(awsTestRegion) {
				if g.Tags["Name"] == inst.Name {
					left = append(left, "security group "+g.Name)
				}
			}
			for _, p := range fake.Parameters(awsTestRegion) {
				if strings.HasPrefix(p.Name, awsguest.ParameterPath(inst.Name, "")) {
					left = append(left, "parameter "+p.Name)
				}
			}
			return left
		},
	}
}
