package aws

import (
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// The contract's rules, checked against the EC2 and SSM fake through the real SDK clients.
func TestConformance(t *testing.T) {
	t.Parallel()
	// Spec has no world of its own: every fake numbers its subnets the same way, so one fake's first subnet
	// is every fake's.
	subnet := ec2fake.New(t, ec2fake.Options{}).Subnets(testRegion)[0].ID
	backendtest.Run(t, backendtest.Harness{
		IDForm: IDForm,
		New: func(t *testing.T) backendtest.World {
			fake, b := newTest(t, ec2fake.Options{})
			if got := fake.Subnets(testRegion)[0].ID; got != subnet {
				t.Fatalf("this fake's first subnet is %s, the first fake's %s: Spec would place proxies nowhere", got, subnet)
			}
			fake.PlayGuests()
			raw := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
			foreign := map[string]string{}
			return backendtest.World{
				Backend:        b,
				LoseNextAnswer: func(*testing.T) { fake.LoseNextAnswer("RunInstances") },
				FailScope:      func(*testing.T) { fake.SetReachable(otherRegion, false) },
				// An instance launched by hand with that Name tag, without the provider's tags.
				Foreign: func(t *testing.T, name string) {
					out, err := raw.RunInstances(t.Context(), &ec2.RunInstancesInput{
						ImageId: awssdk.String(ec2fake.DebianAMI(0, "amd64")), InstanceType: ec2types.InstanceTypeT3Micro,
						MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), SubnetId: awssdk.String(subnet),
						TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
							Tags: []ec2types.Tag{{Key: awssdk.String(tagName), Value: awssdk.String(name)}}}},
					})
					if err != nil {
						t.Fatalf("launching a foreign instance: %v", err)
					}
					foreign[name] = awssdk.ToString(out.Instances[0].InstanceId)
					fake.Settle()
				},
				RemoveForeign: func(t *testing.T, name string) {
					if _, err := raw.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{foreign[name]}}); err != nil {
						t.Fatalf("terminating the foreign instance: %v", err)
					}
					fake.Settle()
				},
				NeverReady: func(*testing.T) { fake.StickNextLaunchInPending(1) },
			}
		},
		Spec: func(name string) backend.Spec {
			return backend.Spec{
				Name:      name,
				Placement: backend.Placement{Backend: Kind, Target: testRegion, Options: &Options{SubnetID: subnet, IAMInstanceProfile: "egress-proxy"}},
				Proxy:     testProxy(),
			}
		},
	})
}
