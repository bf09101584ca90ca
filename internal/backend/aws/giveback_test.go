package aws

import (
	"context"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// A create whose launch EC2 refuses gives back what it made before the launch: the security group and the
// parameters (issue 35, item 14). Seen over the wire, as a user's console would.
func TestRefusedCreateGivesBack(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts      ec2fake.Options
		wantClass backend.Class
	}{
		"instance limit": {opts: ec2fake.Options{MaxInstances: -1}, wantClass: backend.ClassQuota},
		"vcpu quota":     {opts: ec2fake.Options{MaxVCPUs: 1}, wantClass: backend.ClassQuota},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, tc.opts)
			spec := testSpec(fake, "refused")
			_, err := b.Create(context.Background(), spec)
			if err == nil || backend.ClassOf(err) != tc.wantClass {
				t.Fatalf("Create = %v, want class %s", err, tc.wantClass)
			}
			ctx := context.Background()
			groups, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
				Filters: []ec2types.Filter{{Name: awssdk.String("group-name"), Values: []string{securityGroupName(spec.Name)}}}})
			if err != nil {
				t.Fatal(err)
			}
			params, err := ssm.NewFromConfig(fake.AdminAWSConfig(testRegion)).GetParametersByPath(ctx, &ssm.GetParametersByPathInput{
				Path: awssdk.String(guest.ParameterPath(spec.Name, "")[:len(guest.ParameterPath(spec.Name, ""))-1]), Recursive: awssdk.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			if len(groups.SecurityGroups) != 0 || len(params.Parameters) != 0 {
				t.Errorf("after the refused create: %d security groups and %d parameters of the proxy, want none", len(groups.SecurityGroups), len(params.Parameters))
			}
		})
	}
}
