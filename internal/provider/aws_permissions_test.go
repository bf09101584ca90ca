package provider

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// The aws acceptance tests run with exactly the permissions the documentation gives (issue 36): the fake's
// user, whose keys the provider block holds, has the caller policy of examples/permissions/aws; where a test
// gives the fake roles to assume, the user has the assume-role policy too and each such role the caller policy.

// documentedAWSPolicy reads one of the permission documents the docs show, as it is.
func documentedAWSPolicy(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatalf("reading the documented policy: %v", err)
	}
	return string(b)
}

// withDocumentedAWSPolicies gives opts the documented policies, unless the test set the caller's itself.
func withDocumentedAWSPolicies(t *testing.T, opts ec2fake.Options) ec2fake.Options {
	t.Helper()
	if opts.CallerPolicies != nil {
		return opts
	}
	caller := documentedAWSPolicy(t, aws.CallerPolicyFile)
	opts.CallerPolicies = []string{caller}
	opts.Roles = slices.Clone(opts.Roles)
	for i := range opts.Roles {
		if opts.Roles[i].Policy == "" {
			opts.Roles[i].Policy = caller
		}
	}
	if len(opts.Roles) > 0 {
		opts.CallerPolicies = append(opts.CallerPolicies, documentedAWSPolicy(t, aws.AssumeRolePolicyFile))
	}
	return opts
}

// awsCallerPolicyWithout is the documented caller policy without the statement sid.
func awsCallerPolicyWithout(t *testing.T, sid string) string {
	t.Helper()
	var doc struct {
		Version   string           `json:"Version"`
		Statement []map[string]any `json:"Statement"`
	}
	if err := json.Unmarshal([]byte(documentedAWSPolicy(t, aws.CallerPolicyFile)), &doc); err != nil {
		t.Fatal(err)
	}
	n := len(doc.Statement)
	doc.Statement = slices.DeleteFunc(doc.Statement, func(st map[string]any) bool { return st["Sid"] == sid })
	if len(doc.Statement) != n-1 {
		t.Fatalf("the caller policy has no statement %s", sid)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A caller policy without the statement that lets it launch tagged instances: egress_backends names the
// permission before any create, Degraded, and the create fails with the permission and the document to fix
// in the diagnostic, leaving nothing behind.
func TestAccProxyAWS_missingPermission(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{CallerPolicies: []string{awsCallerPolicyWithout(t, "LaunchOnlyTaggedInstances")}})
	fake.PlayGuests()
	docs := regexp.QuoteMeta(aws.CallerPolicyFile)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config: awsConfig(t, fake, "", `data "egress_backends" "all" {}`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"target": knownvalue.StringExact(awsTestRegion), "healthy": knownvalue.Bool(false),
							"reason": knownvalue.StringExact(backend.HealthDegraded),
							"details": knownvalue.MapPartial(map[string]knownvalue.Check{
								"missing_permissions": knownvalue.StringExact("ec2:RunInstances"),
								backend.DetailMessage: knownvalue.StringRegexp(regexp.MustCompile(`lack ec2:RunInstances: grant them the policy in ` + docs)),
							}),
						}),
					})),
				},
			},
			{
				Config: awsConfig(t, fake, "", awsProxy(fake, `team = "net"`, ".example.com", "t3.micro")),
				ExpectError: wrapped(`(?s)Egress proxy request refused by the backend.*` +
					regexp.QuoteMeta("not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:"+awsTestRegion+":"+fake.AccountID()+":instance/*") +
					`.*The AWS credentials the provider uses are not allowed ec2:RunInstances.*Grant them the policy in ` + docs),
			},
		},
	})
	if n := len(liveInstances(fake)); n != 0 {
		t.Errorf("%d instances after a refused launch", n)
	}
}
