package aws

import (
	"context"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestDeleteWhileAnotherGroupNamesTheProxys: a user's rule that admits the proxy's security group elsewhere
// (ec2fake R50) holds the group, and EC2 answers DependencyViolation as it does while a terminated instance
// still holds it (issue 35, item 10). Delete tells the two apart: the reference fails at once, Permanent,
// naming the referencing group, instead of being retried for the whole timeout; once the rule is gone,
// Delete finishes.
func TestDeleteWhileAnotherGroupNamesTheProxys(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "held")
	ctx := backend.WithOwnership(t.Context(), backend.Ownership{Owner: spec.Owner, UID: spec.UID})
	in, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	client := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
	var proxyGroup string
	for _, g := range fake.SecurityGroups(testRegion) {
		if g.Name == securityGroupName(spec.Name) {
			proxyGroup = g.ID
		}
	}
	app, err := client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: awssdk.String("database"), Description: awssdk.String("d")})
	if err != nil {
		t.Fatal(err)
	}
	rule := []ec2types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(5432), ToPort: awssdk.Int32(5432),
		UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: awssdk.String(proxyGroup)}}}}
	if _, err := client.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: app.GroupId, IpPermissions: rule}); err != nil {
		t.Fatal(err)
	}
	// Bounded only so that a regression (the reference retried as Transient) ends the test instead of
	// hanging it; the refusal itself takes no waiting.
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = b.Delete(bounded, in.ID)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(backend.AdviceOf(err), awssdk.ToString(app.GroupId)) ||
		!strings.Contains(err.Error(), "database") {
		t.Fatalf("Delete while %s names the proxy's group = %v (class %s, advice %q), want Permanent naming it", awssdk.ToString(app.GroupId), err, backend.ClassOf(err), backend.AdviceOf(err))
	}
	if _, err := client.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: app.GroupId, IpPermissions: rule}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, in.ID); err != nil {
		t.Fatalf("Delete once the rule is gone: %v", err)
	}
	for _, g := range fake.SecurityGroups(testRegion) {
		if g.ID == proxyGroup {
			t.Errorf("the proxy's group %s is left", proxyGroup)
		}
	}
}
