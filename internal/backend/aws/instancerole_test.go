package aws

import (
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// ownRoleSpec is testSpec with its own instance role (create_instance_role) instead of a profile of the user's.
func ownRoleSpec(fake *ec2fake.Server, name string) backend.Spec {
	spec := testSpec(fake, name)
	o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	o.IAMInstanceProfile, o.CreateInstanceRole = "", true
	return spec
}

// adminIAM reads and changes IAM behind the backend's back, as a user's console would.
func adminIAM(fake *ec2fake.Server) *iam.Client {
	cfg := fake.AdminAWSConfig(ec2fake.IAMSigningRegion)
	return iam.NewFromConfig(cfg, func(o *iam.Options) { o.RetryMaxAttempts = 1 })
}

// roleGone reports whether neither the proxy's role nor its instance profile exists, read over the wire.
func roleGone(t *testing.T, fake *ec2fake.Server, proxy string) bool {
	t.Helper()
	name := instanceRoleName(testRegion, proxy)
	_, roleErr := adminIAM(fake).GetRole(t.Context(), &iam.GetRoleInput{RoleName: awssdk.String(name)})
	_, profileErr := adminIAM(fake).GetInstanceProfile(t.Context(), &iam.GetInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
	for _, err := range []error{roleErr, profileErr} {
		if err != nil && errorCode(err) != "NoSuchEntity" {
			t.Fatal(err)
		}
	}
	return roleErr != nil && profileErr != nil
}

// With create_instance_role, Create makes a role and an instance profile of the proxy's own, tagged as
// everything it makes, trusting EC2 alone, and launches the instance with it; Get reads the setting back;
// Delete removes both once the instance is terminated. Read back through IAM's and EC2's APIs.
func TestOwnInstanceRoleLifecycle(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	spec := ownRoleSpec(fake, "own")
	made, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	name := instanceRoleName(testRegion, spec.Name)
	if name != "egress-proxy-own-eu-west-1" {
		t.Errorf("the role is named %s", name)
	}
	role, err := adminIAM(fake).GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	tags := roleTags(role.Role.Tags)
	if !managed(tags) || tags[backend.LabelOwner] != spec.Owner || tags[backend.LabelUID] != spec.UID || tags[tagName] != spec.Name {
		t.Errorf("the role's tags are %v, want the proxy's own", tags)
	}
	trust, _ := url.QueryUnescape(awssdk.ToString(role.Role.AssumeRolePolicyDocument))
	if !strings.Contains(trust, `"Service":"ec2.amazonaws.com"`) || !strings.Contains(trust, "sts:AssumeRole") {
		t.Errorf("the role trusts %s, want ec2.amazonaws.com alone", trust)
	}
	profile, err := adminIAM(fake).GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(profile.InstanceProfile.Roles) != 1 || awssdk.ToString(profile.InstanceProfile.Roles[0].RoleName) != name ||
		!managed(roleTags(profile.InstanceProfile.Tags)) {
		t.Errorf("the instance profile holds %+v and is tagged %v, want the proxy's role and tags", profile.InstanceProfile.Roles, profile.InstanceProfile.Tags)
	}
	out, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).DescribeInstances(ctx, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: awssdk.String("tag:Name"), Values: []string{spec.Name}}}})
	if err != nil {
		t.Fatal(err)
	}
	in := out.Reservations[0].Instances[0]
	if in.IamInstanceProfile == nil || awssdk.ToString(in.IamInstanceProfile.Arn) != awssdk.ToString(profile.InstanceProfile.Arn) {
		t.Errorf("the instance runs with profile %+v, want %s", in.IamInstanceProfile, awssdk.ToString(profile.InstanceProfile.Arn))
	}
	got, err := b.Get(ctx, made.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o := got.Placement.Options.(*Options); !o.CreateInstanceRole || o.IAMInstanceProfile != "" { //nolint:forcetypeassert // the backend's own
		t.Errorf("Get reads back create_instance_role %t, iam_instance_profile %q", o.CreateInstanceRole, o.IAMInstanceProfile)
	}
	if err := b.Delete(ctx, made.ID); err != nil {
		t.Fatal(err)
	}
	if !roleGone(t, fake, spec.Name) {
		t.Error("the role or its instance profile outlived the proxy")
	}
}

// Root on proxy A, signing with the credentials IMDS serves its instance (the session of the role its
// profile holds), reads and reports its own parameters, decrypting its secrets with the customer's key, and
// nothing of proxy B's, made alike: AccessDeniedException (issue 35, item 2), by the role's inline policy
// alone, with no tag condition to lean on.
func TestOwnInstanceRoleReachesOnlyItsOwnProxy(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := t.Context()
	ids := map[string]string{}
	for _, name := range []string{"proxy-a", "proxy-b"} {
		spec := ownRoleSpec(fake, name)
		spec.Placement.Options.(*Options).KMSKeyID = testKMSKey //nolint:forcetypeassert // ownRoleSpec's own options
		if _, err := b.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range fake.Instances(testRegion) {
		ids[in.Tags["Name"]] = in.ID
	}
	k, sk, tok := fake.InstanceCredentials(testRegion, ids["proxy-a"], time.Hour)
	cfg := fake.AWSConfig(testRegion)
	cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
	asA := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.RetryMaxAttempts = 1 })
	checkReachesOnlyProxyA(ctx, t, asA)
}

// A create refused after the role was made gives it back with the rest: the launch refused over a quota, the
// role itself refused over IAM's. A role of the name that another owner's proxy made, or that no proxy made,
// is refused before anything is launched, named, and left as it is, and what the create made is given back.
func TestOwnInstanceRoleRefusedCreateGivesBack(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts      ec2fake.Options
		theirs    map[string]string // a role of the name made beforehand, with these tags
		wantClass backend.Class
		wantWords string
	}{
		"the launch over the instance limit": {opts: ec2fake.Options{MaxInstances: -1}, wantClass: backend.ClassQuota},
		"the instance profile over IAM's quota": {opts: ec2fake.Options{MaxInstanceProfiles: -1}, wantClass: backend.ClassQuota,
			wantWords: "InstanceProfilesPerAccount"},
		"another owner's role of the name": {theirs: map[string]string{backend.LabelManagedBy: backend.ManagedByValue, backend.LabelOwner: "team-b",
			backend.LabelUID: "uid-theirs", tagName: "refused"}, wantClass: backend.ClassPermanent, wantWords: "team-b"},
		"a role of the name no proxy made": {theirs: map[string]string{"team": "platform"}, wantClass: backend.ClassPermanent,
			wantWords: "not made by this provider"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, tc.opts)
			ctx := t.Context()
			spec := ownRoleSpec(fake, "refused")
			role := instanceRoleName(testRegion, spec.Name)
			if tc.theirs != nil {
				if _, err := adminIAM(fake).CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String(role),
					AssumeRolePolicyDocument: awssdk.String(ec2TrustPolicy), Tags: iamTags(tc.theirs)}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := b.Create(ctx, spec)
			if backend.ClassOf(err) != tc.wantClass || !strings.Contains(err.Error()+backend.AdviceOf(err), tc.wantWords) {
				t.Fatalf("Create = %v (class %s), want class %s naming %q", err, backend.ClassOf(err), tc.wantClass, tc.wantWords)
			}
			if tc.theirs != nil {
				got, err := adminIAM(fake).GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String(role)})
				if err != nil || !maps.Equal(roleTags(got.Role.Tags), tc.theirs) {
					t.Errorf("the role made beforehand: %v, %+v; want it left as it was", err, got)
				}
			} else if !roleGone(t, fake, spec.Name) {
				t.Error("the refused create left its role or instance profile")
			}
			groups, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
				Filters: []ec2types.Filter{{Name: awssdk.String("group-name"), Values: []string{securityGroupName(spec.Name)}}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(groups.SecurityGroups) != 0 {
				t.Errorf("the refused create left its security group")
			}
		})
	}
}

// A profile IAM made moments ago is not known to EC2 for a while ("Invalid IAM Instance Profile name", ec2fake
// R62 with R48's answer): the launch is retried until it is, and past the bound fails with advice.
func TestOwnInstanceRoleWaitsForTheProfile(t *testing.T) {
	t.Parallel()
	for _, bounded := range []bool{false, true} {
		fake, b := newTest(t, ec2fake.Options{Timing: &ec2fake.Timing{PendingPolls: 1, UnseenProfileLaunches: 3}})
		if bounded {
			b.propagation = 0
		}
		_, err := b.Create(t.Context(), ownRoleSpec(fake, "fresh"))
		switch {
		case !bounded && err != nil:
			t.Errorf("Create: %v", err)
		case bounded && (backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(backend.AdviceOf(err), "still did not know the instance profile")):
			t.Errorf("Create past the bound = %v (advice %q), want Permanent with advice on the instance profile", err, backend.AdviceOf(err))
		}
		if bounded && !roleGone(t, fake, "fresh") {
			t.Error("the create refused past the bound left its role")
		}
	}
}

// A proxy whose instance is gone (terminated behind the provider's back) is listed as a leftover by its
// security group, and deleting its id removes its own role too: the settings say it had one.
func TestOwnInstanceRoleOfALeftover(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	spec := ownRoleSpec(fake, "left")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var id string
	for _, in := range fake.Instances(testRegion) {
		id = in.ID
	}
	if _, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	fake.Settle()
	listed, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(listed, func(in backend.Instance) bool { return in.Name == spec.Name })
	if i < 0 || listed[i].State != backend.StateFailed || !strings.Contains(strings.Join(listed[i].Notes, " "), "instance role") {
		t.Fatalf("ListByTag = %+v, want the leftover, its notes naming the instance role", listed)
	}
	if err := b.Delete(ctx, listed[i].ID); err != nil {
		t.Fatal(err)
	}
	if !roleGone(t, fake, spec.Name) {
		t.Error("deleting the leftover left its role")
	}
}

// The role's inline policy allows the actions of the documented instance role policy (InstanceRolePolicyFile),
// statement by statement, on the proxy's own parameters and log stream only, the KMS statement only with a key
// and the CloudWatch Logs ones only with the log on.
func TestOwnInstanceRolePolicyIsTheDocumentedOneScoped(t *testing.T) {
	t.Parallel()
	doc := parseDocumented(t, InstanceRolePolicyFile)
	for _, tc := range []struct {
		key    string
		logs   *CloudWatchLogs
		stream string
	}{
		{key: ""}, {key: testKMSKey}, {key: "alias/proxies"},
		{key: "", logs: &CloudWatchLogs{}, stream: "arn:aws:logs:eu-west-1:123456789012:log-group:/egress-proxy/web:log-stream:web"},
		{key: testKMSKey, logs: &CloudWatchLogs{LogGroup: "shared"}, stream: "arn:aws:logs:eu-west-1:123456789012:log-group:shared:log-stream:web"},
	} {
		var want [][]string
		for _, st := range doc.Statement {
			a := st.actions()
			if (tc.key == "" && strings.HasPrefix(a[0], "kms:")) || (tc.logs == nil && strings.HasPrefix(a[0], "logs:")) {
				continue
			}
			want = append(want, a)
		}
		var p policy
		if err := json.Unmarshal([]byte(instanceRolePolicy(testRegion, "123456789012", "web", tc.key, tc.logs)), &p); err != nil {
			t.Fatal(err)
		}
		var got [][]string
		for _, st := range p.Statement {
			got = append(got, st.actions())
			var resources []string
			if err := json.Unmarshal(st.Resource, &resources); err != nil {
				t.Fatal(err)
			}
			for _, r := range resources {
				if strings.Contains(r, ":ssm:") && !strings.HasPrefix(r, "arn:aws:ssm:eu-west-1:123456789012:parameter/egress-proxy/web/") {
					t.Errorf("%s on %s: beyond the proxy's own parameters", st.actions(), r)
				}
				if strings.Contains(r, ":logs:") && r != tc.stream {
					t.Errorf("%s on %s: beyond the proxy's own log stream %s", st.actions(), r, tc.stream)
				}
			}
			if strings.Contains(string(st.Condition), "egress-proxy-instance") {
				t.Errorf("statement %s leans on the tag condition", st.Sid)
			}
		}
		if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Errorf("key %q, logs %+v: the role's statements allow %v, the documented ones %v", tc.key, tc.logs, got, want)
		}
	}
}

// Role names fit IAM's 64 characters, begin with the prefix the caller policy allows, and differ between
// regions and between long names that share their beginning.
func TestInstanceRoleName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 60) + "bcd"
	names := []string{instanceRoleName("eu-west-1", "web"), instanceRoleName("us-east-1", "web"),
		instanceRoleName("eu-west-1", long), instanceRoleName("eu-west-1", long[:62]+"x"), instanceRoleName("ap-southeast-4", long)}
	for i, n := range names {
		if len(n) > maxRoleName || !strings.HasPrefix(n, InstanceRolePrefix) {
			t.Errorf("%q: %d characters, or not of the prefix", n, len(n))
		}
		if slices.Contains(names[:i], n) {
			t.Errorf("%q twice", n)
		}
	}
}
