package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
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
// parameters, and deletes them at the end. Its checks read the account with the same credentials: the
// egress_address is the account's Elastic IP, associated with the proxy's instance; checkip.amazonaws.com,
// asked through the proxy, sees that address; and after the destroy nothing tagged with the test's owner
// is left (CheckDestroy), nor is the address still allocated. Those reads are tried on the fake by
// TestAccProxyAWS_realAccountChecksOnTheFake; the request through the proxy needs the real instance.
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
	cfg, err := awsconfig.LoadDefaultConfig(t.Context(), awsconfig.WithRegion(region))
	if err != nil {
		t.Fatalf("the AWS SDK's configuration: %v", err)
	}
	account := realAWSAccount{ec2: ec2.NewFromConfig(cfg), ssm: ssm.NewFromConfig(cfg), owner: owner, name: owner}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             func(*terraform.State) error { return account.leftovers(t.Context()) },
		Steps: []resource.TestStep{{
			Config: config,
			Check: func(s *terraform.State) error {
				rs := s.RootModule().Resources["egress_proxy.real"].Primary
				egress := rs.Attributes["egress_address"]
				if err := account.egressIsTheElasticIP(t.Context(), egress); err != nil {
					return err
				}
				// Through the proxy, the destination sees the Elastic IP.
				proxy, err := url.Parse("http://" + net.JoinHostPort(rs.Attributes["ingress_address"], rs.Attributes["port"]))
				if err != nil {
					return err
				}
				seen, err := seenThrough(t.Context(), proxy, "https://checkip.amazonaws.com")
				if err != nil {
					return err
				}
				if seen != egress {
					return fmt.Errorf("through the proxy checkip.amazonaws.com sees %q, want the Elastic IP %s", seen, egress)
				}
				return nil
			},
		}},
	})
}

// seenThrough is the address what answers at target sees, asked through proxy: the first line of its answer,
// as checkip.amazonaws.com gives it. A proxy just up may refuse a first request: tried for two minutes.
func seenThrough(ctx context.Context, proxy *url.URL, target string) (string, error) {
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Second) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			last = fmt.Errorf("through the proxy: %w", err)
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
		_ = resp.Body.Close()
		switch {
		case err != nil:
			last = fmt.Errorf("through the proxy, reading the answer: %w", err)
		case resp.StatusCode != http.StatusOK:
			last = fmt.Errorf("through the proxy: %s: %s", resp.Status, body)
		default:
			return strings.TrimSpace(string(body)), nil
		}
	}
	return "", last
}

// realAWSAccount reads back, with the test's own credentials, what a proxy of owner named name made.
type realAWSAccount struct {
	ec2         *ec2.Client
	ssm         *ssm.Client
	owner, name string
	// egress is the egress address the proxy had, once egressIsTheElasticIP saw it.
	egress string
}

// egressIsTheElasticIP checks that egress is an Elastic IP of the account, allocated for this owner's proxy
// and associated with this owner's instance of the name.
func (a *realAWSAccount) egressIsTheElasticIP(ctx context.Context, egress string) error {
	if net.ParseIP(egress) == nil {
		return fmt.Errorf("egress_address %q is not an address", egress)
	}
	a.egress = egress
	out, err := a.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{PublicIps: []string{egress}})
	if err != nil {
		return fmt.Errorf("egress_address %s is not an Elastic IP of the account: %w", egress, err)
	}
	if len(out.Addresses) != 1 {
		return fmt.Errorf("egress_address %s: DescribeAddresses answered %d addresses", egress, len(out.Addresses))
	}
	eip := out.Addresses[0]
	if tags := ec2TagMap(eip.Tags); tags[backend.LabelOwner] != a.owner || tags["Name"] != a.name {
		return fmt.Errorf("the Elastic IP %s (%s) is not the proxy's: tags %v", egress, awssdk.ToString(eip.AllocationId), tags)
	}
	instanceID := awssdk.ToString(eip.InstanceId)
	if instanceID == "" {
		return fmt.Errorf("the Elastic IP %s is associated with no instance", egress)
	}
	in, err := a.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		return fmt.Errorf("the instance of the Elastic IP %s: %w", egress, err)
	}
	if len(in.Reservations) != 1 || len(in.Reservations[0].Instances) != 1 {
		return fmt.Errorf("the Elastic IP %s is associated with %s, which DescribeInstances does not answer alone", egress, instanceID)
	}
	i := in.Reservations[0].Instances[0]
	if tags := ec2TagMap(i.Tags); tags[backend.LabelOwner] != a.owner || tags["Name"] != a.name || i.State == nil || i.State.Name != ec2types.InstanceStateNameRunning {
		return fmt.Errorf("the Elastic IP %s is associated with %s, not the proxy's running instance (tags %v)", egress, instanceID, tags)
	}
	return nil
}

// leftovers lists what the owner's proxy left in the account: instances not terminated, security groups and
// Elastic IPs tagged with the owner, the proxy's parameters, and the egress address if it is still
// allocated.
func (a *realAWSAccount) leftovers(ctx context.Context) error {
	var left []error
	owned := ec2types.Filter{Name: awssdk.String("tag:" + backend.LabelOwner), Values: []string{a.owner}}
	instances, err := a.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{owned,
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "shutting-down", "stopping", "stopped"}}}})
	if err != nil {
		return fmt.Errorf("DescribeInstances: %w", err)
	}
	for _, r := range instances.Reservations {
		for _, i := range r.Instances {
			left = append(left, fmt.Errorf("instance %s (%s)", awssdk.ToString(i.InstanceId), i.State.Name))
		}
	}
	groups, err := a.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{owned}})
	if err != nil {
		return fmt.Errorf("DescribeSecurityGroups: %w", err)
	}
	for _, g := range groups.SecurityGroups {
		left = append(left, fmt.Errorf("security group %s (%s)", awssdk.ToString(g.GroupId), awssdk.ToString(g.GroupName)))
	}
	addresses, err := a.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []ec2types.Filter{owned}})
	if err != nil {
		return fmt.Errorf("DescribeAddresses: %w", err)
	}
	for _, e := range addresses.Addresses {
		left = append(left, fmt.Errorf("Elastic IP %s (%s)", awssdk.ToString(e.PublicIp), awssdk.ToString(e.AllocationId)))
	}
	if a.egress != "" {
		_, err := a.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{PublicIps: []string{a.egress}})
		var ae smithy.APIError
		switch {
		case err == nil:
			left = append(left, fmt.Errorf("the egress address %s is still allocated to the account", a.egress))
		case !errors.As(err, &ae) || ae.ErrorCode() != "InvalidAddress.NotFound":
			return fmt.Errorf("DescribeAddresses %s: %w", a.egress, err)
		}
	}
	// By name, with GetParameters, as the backend reads them (the policy the docs give it allows no listing):
	// every parameter a proxy may have, parts included, ten names a call.
	for names := awsguest.ParameterPaths(a.name); len(names) > 0; {
		batch := names[:min(len(names), 10)]
		names = names[len(batch):]
		params, err := a.ssm.GetParameters(ctx, &ssm.GetParametersInput{Names: batch})
		if err != nil {
			return fmt.Errorf("GetParameters %v: %w", batch, err)
		}
		for _, p := range params.Parameters {
			left = append(left, fmt.Errorf("parameter %s", awssdk.ToString(p.Name)))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("after the destroy the account holds what the proxy made: %w", errors.Join(left...))
	}
	return nil
}

func ec2TagMap(tags []ec2types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return m
}

// The real-account test's reads of the account, tried on the fake (all but the request through the proxy,
// which needs the real instance): while the proxy lives, its egress_address is found as its Elastic IP and
// its objects are found as leftovers; after the destroy, nothing is.
func TestAccProxyAWS_realAccountChecksOnTheFake(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	cfg := fake.AWSConfig(awsTestRegion)
	account := realAWSAccount{ec2: ec2.NewFromConfig(cfg), ssm: ssm.NewFromConfig(cfg), owner: "team-a", name: "egress-acc"}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy:             func(*terraform.State) error { return account.leftovers(t.Context()) },
		Steps: []resource.TestStep{{
			Config: awsConfig(t, fake, "", awsProxy(fake, "", "checkip.amazonaws.com", "t3.micro")),
			Check: func(s *terraform.State) error {
				egress := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes["egress_address"]
				if err := account.egressIsTheElasticIP(t.Context(), egress); err != nil {
					return err
				}
				switch err := account.leftovers(t.Context()); {
				case err == nil:
					return fmt.Errorf("while the proxy lives, leftovers finds nothing: want its objects, its Elastic IP %s among them", egress)
				case !strings.Contains(err.Error(), egress):
					return fmt.Errorf("while the proxy lives, leftovers finds (%w), not its Elastic IP %s", err, egress)
				}
				return nil
			},
		}},
	})
}
