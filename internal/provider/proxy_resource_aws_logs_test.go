package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// awsLogsProxy is a proxy with its own instance role and aws.cloudwatch_logs = logs.
func awsLogsProxy(fake *ec2fake.Server, logs string) string {
	return fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-logs"
  aws = {
    subnet_id            = %q
    create_instance_role = true
    cloudwatch_logs      = %s
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["example.com"]
}
`, fake.Subnets(awsTestRegion)[0].ID, logs)
}

// The access log in CloudWatch Logs, on the EC2 fake with the documented caller policy: a proxy's own log
// group made with the retention asked for and the proxy's tags, read back and imported as configured; values
// CloudWatch Logs would refuse stopped at plan time on the attribute at fault; a move to a shared group
// replaces the proxy, keeps its former group (and lines) and leaves the shared one as it was; destroy leaves
// no group of the provider's.
func TestAccProxyAWS_cloudWatchLogs(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(awsTestRegion))
	const own, shared = "/egress-proxy/egress-logs", "team/proxy-logs"
	if _, err := admin.CreateLogGroup(t.Context(), &cloudwatchlogs.CreateLogGroupInput{LogGroupName: awssdk.String(shared)}); err != nil {
		t.Fatal(err)
	}
	group := func(name string) (retention int32, tags map[string]string, err error) {
		out, err := admin.DescribeLogGroups(t.Context(), &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: awssdk.String(name)})
		if err != nil {
			return 0, nil, err
		}
		for _, g := range out.LogGroups {
			if awssdk.ToString(g.LogGroupName) == name {
				tagged, err := admin.ListTagsForResource(t.Context(), &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: g.LogGroupArn})
				if err != nil {
					return 0, nil, err
				}
				return awssdk.ToInt32(g.RetentionInDays), tagged.Tags, nil
			}
		}
		return 0, nil, fmt.Errorf("no log group %s", name)
	}
	config := func(logs string) string { return awsConfig(t, fake, "", awsLogsProxy(fake, logs)) }
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if names := fake.LogGroupNames(awsTestRegion); !slices.Equal(names, []string{shared}) {
				return fmt.Errorf("log groups after destroy: %v, want the shared one alone", names)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{Config: config(`{ retention_days = 31 }`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)aws\.cloudwatch_logs\.retention_days.*value\s+must\s+be\s+one\s+of`)},
			{Config: config(`{ log_group = "aws/lambda" }`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)aws\.cloudwatch_logs\.log_group.*may\s+not\s+begin\s+with\s+aws/`)},
			{Config: config(`{ log_group = "/egress-proxy/other" }`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)aws\.cloudwatch_logs\.log_group.*each\s+proxy's\s+own\s+group`)},
			{Config: config(`{ log_group = "` + shared + `", retention_days = 7 }`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)aws\.cloudwatch_logs\.(retention_days|log_group).*cannot\s+be\s+specified\s+when`)},
			{
				Config: config(`{ retention_days = 7 }`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("aws").AtMapKey("cloudwatch_logs"),
						knownvalue.ObjectExact(map[string]knownvalue.Check{"log_group": knownvalue.Null(), "retention_days": knownvalue.Int64Exact(7)})),
				},
				Check: func(*terraform.State) error {
					days, tags, err := group(own)
					if err != nil || days != 7 || tags[backend.LabelOwner] != "team-a" || tags[backend.LabelManagedBy] != backend.ManagedByValue || tags[backend.LabelUID] == "" {
						return fmt.Errorf("the proxy's log group: %d days, tags %v, %w; want 7 days and the proxy's tags", days, tags, err)
					}
					return nil
				},
			},
			{Config: config(`{ retention_days = 7 }`), PlanOnly: true},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// To a shared group: the guest is told where to write when its instance starts, so the proxy is
				// replaced; its own group, with its lines, is kept for the proxy of its name until it is
				// destroyed (CheckDestroy), the shared one is not touched.
				Config: config(`{ log_group = "` + shared + `" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: func(*terraform.State) error {
					if names := fake.LogGroupNames(awsTestRegion); !slices.Equal(names, []string{own, shared}) {
						return fmt.Errorf("log groups after the move: %v, want the proxy's former one kept and the shared one", names)
					}
					if days, tags, err := group(shared); err != nil || days != 0 || len(tags) != 0 {
						return fmt.Errorf("the shared group was changed: %d days, tags %v, %w", days, tags, err)
					}
					return nil
				},
			},
			{Config: config(`{ log_group = "` + shared + `" }`), PlanOnly: true},
		},
	})
}
