package aws

import (
	"context"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// The regions the tests configure: proxies go to testRegion; otherRegion is a second target.
const (
	testRegion  = "eu-west-1"
	otherRegion = "us-east-1"
)

// newTest starts an EC2 and SSM fake and a backend of both its regions that reaches it with the fake's
// credentials, polling without the production pauses. The credentials are allowed exactly the documented
// caller policy (CallerPolicyFile) unless opts gives policies of its own; what a test does behind the
// backend's back goes through fake.AdminAWSConfig.
func newTest(t *testing.T, opts ec2fake.Options) (*ec2fake.Server, *Backend) {
	t.Helper()
	if opts.CallerPolicies == nil {
		opts.CallerPolicies = []string{documentedPolicy(t, CallerPolicyFile)}
	}
	fake := ec2fake.New(t, opts)
	creds, err := fake.Credentials().Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	region := RegionConfig{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey,
		EC2Endpoint: fake.URL(), SSMEndpoint: fake.URL(), STSEndpoint: fake.URL(), ServiceQuotasEndpoint: fake.URL(), IAMEndpoint: fake.URL(),
		LogsEndpoint: fake.URL(), ELBEndpoint: fake.URL()}
	b, err := New(Config{DefaultRegion: testRegion, Regions: map[string]RegionConfig{testRegion: region, otherRegion: region}})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInitial, b.pollMax = 2*time.Millisecond, 20*time.Millisecond
	b.retry = backend.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Factor: 2}
	return fake, b
}

// testSpec is a proxy in the first subnet of testRegion.
func testSpec(fake *ec2fake.Server, name string) backend.Spec {
	return backend.Spec{
		Name: name, UID: "uid-" + name, Owner: "team-a", Labels: map[string]string{"env": "test"},
		Placement: backend.Placement{Backend: Kind, Target: testRegion, Options: &Options{
			SubnetID: fake.Subnets(testRegion)[0].ID, IAMInstanceProfile: "egress-proxy",
		}},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}, AllowedPorts: []int{443}},
	}
}

func testProxy() proxyconf.Settings {
	return proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}, AllowedPorts: []int{443}}
}
