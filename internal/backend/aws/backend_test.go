package aws

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

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
// credentials, polling without the production pauses.
func newTest(t *testing.T, opts ec2fake.Options) (*ec2fake.Server, *Backend) {
	t.Helper()
	fake := ec2fake.New(t, opts)
	creds, err := fake.Credentials().Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	region := RegionConfig{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey,
		EC2Endpoint: fake.URL(), SSMEndpoint: fake.URL(), STSEndpoint: fake.URL()}
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

// playGuests plays the guest side of every instance: the agent, which applies each configuration written to
// a proxy's config parameter and reports its id in the applied parameter, through the same SSM API. No
// proxy runs here: what the tests prove is the backend's part of a change.
func playGuests(t *testing.T, fake *ec2fake.Server) {
	client := ssm.NewFromConfig(fake.AWSConfig(testRegion))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, p := range fake.Parameters(testRegion) {
				if !strings.HasSuffix(p.Name, "/"+proxyconf.AWSParameterConfig) {
					continue
				}
				var c proxyconf.AWSConfig
				if json.Unmarshal([]byte(p.Value), &c) != nil {
					continue
				}
				prefix := strings.TrimSuffix(p.Name, proxyconf.AWSParameterConfig)
				applied := prefix + proxyconf.AWSParameterApplied
				if cur, ok := fake.Parameter(testRegion, applied); ok && cur.Value == c.ConfigID {
					continue
				}
				// Only a running instance's agent reports; one that stopped running while the report was on
				// its way never sent it (its parameters may already be deleted), so the report is taken back.
				name := strings.TrimSuffix(strings.TrimPrefix(prefix, proxyconf.AWSParameterPrefix), "/")
				if !runningProxy(fake, testRegion, name) {
					continue
				}
				_, _ = client.PutParameter(ctx, &ssm.PutParameterInput{Name: awssdk.String(applied), Value: awssdk.String(c.ConfigID),
					Type: ssmtypes.ParameterTypeString, Overwrite: awssdk.Bool(true)})
				if !runningProxy(fake, testRegion, name) {
					_, _ = client.DeleteParameters(ctx, &ssm.DeleteParametersInput{Names: []string{applied}})
				}
			}
		}
	}()
}

func testProxy() proxyconf.Settings {
	return proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}, AllowedPorts: []int{443}}
}

// runningProxy reports whether the fake runs an instance of the proxy named name.
func runningProxy(fake *ec2fake.Server, region, name string) bool {
	for _, in := range fake.Instances(region) {
		if in.Tags[tagName] == name && in.State == "running" {
			return true
		}
	}
	return false
}
