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

// TestDeleteWhileAnotherGroupNamesTheProxys: a user's rule that names the proxy's security group elsewhere,
// inbound (admitting the proxy) or outbound (sending to it) (ec2fake R50), holds the group, and EC2 answers
// DependencyViolation as it does while a terminated instance still holds it (issue 35, item 10). Delete tells
// the two apart: a reference fails at once, Permanent, naming every referencing group, instead of being
// retried for the whole timeout; once the rules are gone, Delete finishes.
func TestDeleteWhileAnotherGroupNamesTheProxys(t *testing.T) {
	t.Parallel()
	for name, refs := range map[string][]string{
		"inbound":  {"inbound"},
		"outbound": {"outbound"},
		"both":     {"inbound", "outbound"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			deleteWhileReferenced(t, refs)
		})
	}
}

// deleteWhileReferenced makes a proxy, then for each direction a group of the user's whose rule of that
// direction names the proxy's group, and deletes the proxy.
func deleteWhileReferenced(t *testing.T, directions []string) {
	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "held")
	ctx := backend.WithOwnership(t.Context(), backend.Ownership{Owner: spec.Owner, UID: spec.UID})
	in, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	client := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
	found, err := client.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
		Filters: []ec2types.Filter{{Name: awssdk.String("group-name"), Values: []string{securityGroupName(spec.Name)}}}})
	if err != nil || len(found.SecurityGroups) != 1 {
		t.Fatalf("the proxy's group: %v, %v", found, err)
	}
	proxyGroup := awssdk.ToString(found.SecurityGroups[0].GroupId)
	rule := []ec2types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(5432), ToPort: awssdk.Int32(5432),
		UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: awssdk.String(proxyGroup)}}}}
	type user struct{ id, name, direction string }
	var users []user
	for _, dir := range directions {
		name := "database-" + dir
		g, err := client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: awssdk.String(name), Description: awssdk.String("d")})
		if err != nil {
			t.Fatal(err)
		}
		if dir == "inbound" {
			_, err = client.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: rule})
		} else {
			_, err = client.AuthorizeSecurityGroupEgress(ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: rule})
		}
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, user{awssdk.ToString(g.GroupId), name, dir})
	}
	// Bounded only so that a regression (the reference retried as Transient) ends the test instead of
	// hanging it; the refusal itself takes no waiting.
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = b.Delete(bounded, in.ID)
	if backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("Delete while %v name the proxy's group = %v (class %s) after %s, want Permanent at once", users, err, backend.ClassOf(err), time.Since(start).Round(time.Millisecond))
	}
	for _, u := range users {
		if !strings.Contains(backend.AdviceOf(err), u.id) || !strings.Contains(err.Error(), u.name) || !strings.Contains(err.Error(), u.direction) {
			t.Errorf("Delete's error does not name %s (%s, %s rules):\n%v\nadvice: %s", u.id, u.name, u.direction, err, backend.AdviceOf(err))
		}
	}
	for _, u := range users {
		if u.direction == "inbound" {
			_, err = client.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: awssdk.String(u.id), IpPermissions: rule})
		} else {
			_, err = client.RevokeSecurityGroupEgress(ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: awssdk.String(u.id), IpPermissions: rule})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(ctx, in.ID); err != nil {
		t.Fatalf("Delete once the rules are gone: %v", err)
	}
	if _, err := client.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{proxyGroup}}); err == nil ||
		!strings.Contains(err.Error(), "InvalidGroup.NotFound") {
		t.Errorf("the proxy's group %s after Delete: %v, want InvalidGroup.NotFound", proxyGroup, err)
	}
}
