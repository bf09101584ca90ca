package provider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// An aws proxy of three instances on the EC2 fake: one instance in each of the region's three subnets (each
// its own Availability Zone) behind an internal Network Load Balancer, read back as members with their own
// egress addresses, the load balancer's first node as internal_address and its DNS name in proxy_url; the
// target group health-checked on the health port, the listener on the proxy port; a member failing its
// health check makes the proxy Degraded at the next refresh; import reads the same proxy back; a change of
// labels is made in place and reaches the load balancer and target group; destroy leaves no instance and no
// part of the load balancer.
func TestAccProxyAWS_instances(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	const name = "egress-acc-ha"
	proxyConfig := func(labels string) string { return awsThreeInstancesConfig(t, fake, name, labels) }
	config := proxyConfig(`env = "test"`)
	root := func(attr string) tfjsonpath.Path { return tfjsonpath.New(attr) }
	sameID := statecheck.CompareValue(compare.ValuesSame())
	admin := elb.NewFromConfig(fake.AdminAWSConfig(awsTestRegion))
	var secondMember string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             awsNothingLeft(fake),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: append(threeInstancesRead("aws"),
					statecheck.ExpectKnownValue("egress_proxy.test", root("id"), knownvalue.StringExact("aws/"+awsTestRegion+"/"+name)),
					sameID.AddStateValue("egress_proxy.test", root("id")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(0, "scope"), knownvalue.StringExact(awsTestRegion+"a")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(1, "scope"), knownvalue.StringExact(awsTestRegion+"b")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(2, "scope"), knownvalue.StringExact(awsTestRegion+"c")),
				),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					ctx := context.Background()
					lbs, err := admin.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
					if err != nil || len(lbs.LoadBalancers) != 1 {
						return fmt.Errorf("load balancers %v, want one: %w", lbs, err)
					}
					lb := lbs.LoadBalancers[0]
					if lb.Scheme != elbtypes.LoadBalancerSchemeEnumInternal || len(lb.AvailabilityZones) != 3 ||
						a["internal_address"] != awssdk.ToString(lb.AvailabilityZones[0].LoadBalancerAddresses[0].PrivateIPv4Address) ||
						!strings.Contains(a["proxy_url"], awssdk.ToString(lb.DNSName)) {
						return fmt.Errorf("internal_address %q, proxy_url %q; load balancer %+v", a["internal_address"], a["proxy_url"], lb)
					}
					tgs, err := admin.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{LoadBalancerArn: lb.LoadBalancerArn})
					if err != nil || len(tgs.TargetGroups) != 1 {
						return fmt.Errorf("target groups %v, want one: %w", tgs, err)
					}
					tg := tgs.TargetGroups[0]
					if awssdk.ToString(tg.HealthCheckPort) != strconv.Itoa(proxyconf.DefaultHealthPort) || awssdk.ToString(tg.HealthCheckPath) != proxyconf.HealthPath {
						return fmt.Errorf("target group %+v, want its health checks on the health port %d", tg, proxyconf.DefaultHealthPort)
					}
					ls, err := admin.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
					if err != nil || len(ls.Listeners) != 1 || awssdk.ToInt32(ls.Listeners[0].Port) != 3128 {
						return fmt.Errorf("listeners %v, want one on 3128: %w", ls, err)
					}
					for i := range 3 {
						in, ok := fake.Instance(awsTestRegion, a[fmt.Sprintf("members.%d.name", i)])
						if !ok || in.PublicIP == "" || a[fmt.Sprintf("members.%d.egress_address", i)] != in.PublicIP || a[fmt.Sprintf("egress_addresses.%d", i)] != in.PublicIP {
							return fmt.Errorf("member %d egresses from %q, its instance %+v", i, a[fmt.Sprintf("members.%d.egress_address", i)], in)
						}
					}
					secondMember = a["members.1.name"]
					if !slices.Contains(fake.TargetGroups(awsTestRegion), awssdk.ToString(tg.TargetGroupName)) {
						return fmt.Errorf("target group %s not in the fake", awssdk.ToString(tg.TargetGroupName))
					}
					return nil
				},
			},
			{Config: config, PlanOnly: true},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// The second instance fails the load balancer's health check: the refresh reads the proxy
				// Degraded, naming the member and why, under the same id.
				PreConfig: func() { fake.SetTargetHealth(awsTestRegion, secondMember, false) },
				Config:    config,
				ConfigStateChecks: append(secondMemberFailing(regexp.MustCompile(`^unhealthy \(Target\.FailedHealthChecks\)`)),
					sameID.AddStateValue("egress_proxy.test", root("id")),
				),
			},
			{
				// The labels change in place: the load balancer and the target group carry the new ones, not
				// the one dropped, and are still the provider's.
				Config: proxyConfig(`team = "net"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", root("id"))},
				Check: func(*terraform.State) error {
					ctx := context.Background()
					lbs, err := admin.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
					if err != nil || len(lbs.LoadBalancers) != 1 {
						return fmt.Errorf("load balancers %v, want one: %w", lbs, err)
					}
					tgs, err := admin.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{LoadBalancerArn: lbs.LoadBalancers[0].LoadBalancerArn})
					if err != nil || len(tgs.TargetGroups) != 1 {
						return fmt.Errorf("target groups %v, want one: %w", tgs, err)
					}
					for _, arn := range []*string{lbs.LoadBalancers[0].LoadBalancerArn, tgs.TargetGroups[0].TargetGroupArn} {
						res, err := admin.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{awssdk.ToString(arn)}})
						if err != nil {
							return err
						}
						tags := map[string]string{}
						for _, t := range res.TagDescriptions[0].Tags {
							tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
						}
						if _, ok := tags["env"]; ok || tags["team"] != "net" || tags[backend.LabelManagedBy] != backend.ManagedByValue || tags[backend.LabelUID] == "" {
							return fmt.Errorf("%s tagged %v after the label change, want team=net, no env, the provider's own tags", awssdk.ToString(arn), tags)
						}
					}
					return nil
				},
			},
		},
	})
}

// aws.instances is checked at plan time, on the attribute: several need subnet_ids and no Elastic IP.
func TestAccProxyAWS_instancesRefusedAtPlan(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	subnet := fake.Subnets(awsTestRegion)[0].ID
	proxy := func(aws string) string {
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name                 = "egress-acc-ha"
  aws                  = { %s, iam_instance_profile = "egress-proxy" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
`, aws))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: proxy(fmt.Sprintf("subnet_id = %q, instances = 2", subnet)), PlanOnly: true,
				ExpectError: regexp.MustCompile(`Several aws instances need subnet_ids`)},
			{Config: proxy(fmt.Sprintf("subnet_ids = [%q, %q], instances = 2, static_egress_ip = true", subnet, fake.Subnets(awsTestRegion)[1].ID)), PlanOnly: true,
				ExpectError: regexp.MustCompile(`Several aws instances have no Elastic IP`)},
			{Config: proxy(fmt.Sprintf("subnet_ids = [%q, %q], instances = 11", subnet, fake.Subnets(awsTestRegion)[1].ID)), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)value must be between\s+1 and 10`)},
			// 59 client ranges fit one instance's group (59 of 60 rules), not two instances' (and a rule per subnet).
			{Config: strings.Replace(proxy(fmt.Sprintf("subnet_ids = [%q, %q], instances = 2", subnet, fake.Subnets(awsTestRegion)[1].ID)),
				`["10.0.0.0/8"]`, manyRanges(59), 1), PlanOnly: true,
				ExpectError: regexp.MustCompile(`Too many client ranges for an aws proxy's security group`)},
		},
	})
}

// manyRanges is n IPv4 ranges as an HCL list.
func manyRanges(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Quote(fmt.Sprintf("10.%d.0.0/16", i))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// An aws proxy's instances changed between counts above one on the EC2 fake: 2 to 3 and 3 to 2 are updates
// behind the same load balancer (the same id and DNS name, the new member healthy, the one removed
// terminated only once drained), each followed by an empty plan; 2 to 1 replaces the proxy.
func TestAccProxyAWS_instancesChangedInPlace(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	const name = "egress-acc-resize"
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameName := statecheck.CompareValue(compare.ValuesSame())
	running := func(want int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if n := len(liveInstances(fake)); n != want {
				return fmt.Errorf("the fake runs %d instances, want %d", n, want)
			}
			if n := fake.DrainsCut(awsTestRegion); n != 0 {
				return fmt.Errorf("%d instances were terminated while the load balancer still drained them", n)
			}
			return nil
		}
	}
	step := func(n int, action plancheck.ResourceActionType, kept ...statecheck.StateCheck) resource.TestStep {
		members := n
		if n == 1 {
			members = 0 // a proxy of one instance lists no members
		}
		return resource.TestStep{
			Config:            awsInstancesConfig(t, fake, name, "", n),
			ConfigPlanChecks:  expectAction(action),
			ConfigStateChecks: append(kept, statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("members"), knownvalue.ListSizeExact(members))),
			Check:             running(n),
		}
	}
	kept := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
			sameName.AddStateValue("egress_proxy.test", tfjsonpath.New("proxy_url")),
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             awsNothingLeft(fake),
		Steps: []resource.TestStep{
			step(2, plancheck.ResourceActionCreate, kept()...),
			step(3, plancheck.ResourceActionUpdate, append(kept(),
				statecheck.ExpectKnownValue("egress_proxy.test", memberPath(2, "healthy"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("egress_proxy.test", memberPath(2, "scope"), knownvalue.StringExact(awsTestRegion+"c")))...),
			{Config: awsInstancesConfig(t, fake, name, "", 3), PlanOnly: true},
			step(2, plancheck.ResourceActionUpdate, kept()...),
			{Config: awsInstancesConfig(t, fake, name, "", 2), PlanOnly: true},
			step(1, plancheck.ResourceActionReplace),
		},
	})
}

// An aws proxy of two instances given a new ami on the EC2 fake: an update that keeps the proxy's id, address
// and instances, each instance's root volume made again from the new image (a surge instance serving
// meanwhile, gone after), followed by an empty plan; the same image for one instance replaces the proxy.
func TestAccProxyAWS_imageRolledInPlace(t *testing.T) {
	newer := ec2fake.NewerDebian
	fake := awsFake(t, ec2fake.Options{Images: []ec2fake.Image{newer}})
	fake.PlayGuests()
	const name = "egress-acc-roll"
	sameID, sameURL := statecheck.CompareValue(compare.ValuesSame()), statecheck.CompareValue(compare.ValuesSame())
	sameFirst, sameSecond := statecheck.CompareValue(compare.ValuesSame()), statecheck.CompareValue(compare.ValuesSame())
	kept := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
			sameURL.AddStateValue("egress_proxy.test", tfjsonpath.New("proxy_url")),
			sameFirst.AddStateValue("egress_proxy.test", memberPath(0, "name")),
			sameSecond.AddStateValue("egress_proxy.test", memberPath(1, "name")),
		}
	}
	rolled := func(tasks int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if n := len(fake.RootVolumeTasks(awsTestRegion)); n != tasks {
				return fmt.Errorf("%d root volumes made again, want %d", n, tasks)
			}
			if n := len(liveInstances(fake)); n != 2 {
				return fmt.Errorf("the fake runs %d instances, want 2: the surge instance stayed", n)
			}
			return nil
		}
	}
	config := func(n int, ami string) string {
		return awsInstancesConfigWith(t, fake, name, "", n, fmt.Sprintf("ami = %q", ami))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             awsNothingLeft(fake),
		Steps: []resource.TestStep{
			{Config: awsInstancesConfig(t, fake, name, "", 2), ConfigStateChecks: kept(), Check: rolled(0)},
			{Config: config(2, newer.ID), ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate), Check: rolled(2),
				ConfigStateChecks: append(kept(), statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("aws").AtMapKey("ami"), knownvalue.StringExact(newer.ID)))},
			{Config: config(2, newer.ID), PlanOnly: true},
			{Config: config(1, newer.ID), ConfigPlanChecks: expectAction(plancheck.ResourceActionReplace)},
		},
	})
}

// awsNothingLeft checks, after destroy, that the fake holds no live instance, no Elastic IP, no part of a load
// balancer, no security group but the default and no parameter of a proxy.
func awsNothingLeft(fake *ec2fake.Server) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if n, lbs, tgs := len(liveInstances(fake)), fake.LoadBalancers(awsTestRegion), fake.TargetGroups(awsTestRegion); n != 0 || len(lbs)+len(tgs) != 0 {
			return fmt.Errorf("after destroy: %d instances, load balancers %v, target groups %v", n, lbs, tgs)
		}
		if n := len(fake.Addresses(awsTestRegion)); n != 0 {
			return fmt.Errorf("%d Elastic IPs left after destroy", n)
		}
		for _, g := range fake.SecurityGroups(awsTestRegion) {
			if g.Name != "default" {
				return fmt.Errorf("security group %s left after destroy", g.Name)
			}
		}
		for _, p := range fake.Parameters(awsTestRegion) {
			if strings.HasPrefix(p.Name, awsguest.ParameterPrefix) {
				return fmt.Errorf("parameter %s left after destroy", p.Name)
			}
		}
		return nil
	}
}

// awsThreeInstancesConfig is egress_proxy.test named name, of three instances over the fake's subnets (one in
// each), with labels (HCL map entries) when not empty.
func awsThreeInstancesConfig(t *testing.T, fake *ec2fake.Server, name, labels string) string {
	return awsInstancesConfig(t, fake, name, labels, 3)
}

// awsInstancesConfig is egress_proxy.test named name, of n instances: over the fake's subnets (instance i in
// subnet i mod their number) for several, in the first subnet for one.
func awsInstancesConfig(t *testing.T, fake *ec2fake.Server, name, labels string, n int) string {
	return awsInstancesConfigWith(t, fake, name, labels, n, "")
}

// awsInstancesConfigWith is awsInstancesConfig with extra, an attribute line of its aws block, when not empty.
func awsInstancesConfigWith(t *testing.T, fake *ec2fake.Server, name, labels string, n int, extra string) string {
	var subnets []string
	for _, sn := range fake.Subnets(awsTestRegion) {
		subnets = append(subnets, strconv.Quote(sn.ID))
	}
	where := fmt.Sprintf("subnet_ids           = [%s]", strings.Join(subnets, ", "))
	if n == 1 {
		where = "subnet_id            = " + subnets[0]
	}
	labelsLine := ""
	if labels != "" {
		labelsLine = "  labels               = { " + labels + " }\n"
	}
	return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = %q
  aws = {
    %s
    instances            = %d
    iam_instance_profile = "egress-proxy"
    wait_for_proxy       = true
    %s
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
%s}
`, name, where, n, extra, labelsLine))
}
