package aws

import (
	"context"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// With the documented policy (InstanceRolePolicyFile) on a role two proxies share, root on proxy A, signing with A's instance
// credentials, reads and reports only A's parameters: B's secrets and B's applied are AccessDeniedException
// (issue 35, item 2). Before the parameters were bound to their instance, A could read every proxy's.
func TestInstanceRoleReachesOnlyItsOwnProxy(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{Roles: []ec2fake.Role{{Name: "egress-proxy", Policy: documentedPolicy(t, InstanceRolePolicyFile)}}})
	fake.PlayGuests()
	ids := map[string]string{}
	for _, name := range []string{"proxy-a", "proxy-b"} {
		if _, err := b.Create(context.Background(), testSpec(fake, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range fake.Instances(testRegion) {
		ids[in.Tags["Name"]] = in.ID
	}
	k, sk, tok := fake.InstanceProfileCredentials("egress-proxy", ids["proxy-a"], time.Hour)
	cfg := fake.AWSConfig(testRegion)
	cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
	asA := ssm.NewFromConfig(cfg)
	ctx := context.Background()
	checkReachesOnlyProxyA(ctx, t, asA)
}

// checkReachesOnlyProxyA holds an SSM client signed as proxy A's instance to its own parameters: it reads and
// decrypts A's and reports A applied, and gets AccessDeniedException for B's.
func checkReachesOnlyProxyA(ctx context.Context, t *testing.T, asA *ssm.Client) {
	t.Helper()
	read := func(proxy string) error {
		_, err := asA.GetParameters(ctx, &ssm.GetParametersInput{WithDecryption: awssdk.Bool(true), Names: []string{
			guest.ParameterPath(proxy, guest.ParameterConfig), guest.ParameterPath(proxy, guest.ParameterSecrets),
			guest.ParameterPath(proxy, guest.ParameterApplied),
		}})
		return err
	}
	report := func(proxy string) error {
		_, err := asA.PutParameter(ctx, &ssm.PutParameterInput{Name: awssdk.String(guest.ParameterPath(proxy, guest.ParameterApplied)),
			Value: awssdk.String("0123456789abcdef"), Type: ssmtypes.ParameterTypeString, Overwrite: awssdk.Bool(true)})
		return err
	}
	for name, tc := range map[string]struct {
		call   func(string) error
		proxy  string
		denied bool
	}{
		"A reads and decrypts its own": {read, "proxy-a", false},
		"A reports its own":            {report, "proxy-a", false},
		"A reads B's secrets":          {read, "proxy-b", true},
		"A reports B applied":          {report, "proxy-b", true},
	} {
		err := tc.call(tc.proxy)
		if tc.denied != (err != nil) || (tc.denied && !strings.Contains(err.Error(), "AccessDeniedException")) {
			t.Errorf("%s: %v, want denied %v (AccessDeniedException)", name, err, tc.denied)
		}
	}
}
