package aws

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwltypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../../.."

// documentedPolicy reads one of the permission documents the docs show, as it is.
func documentedPolicy(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatalf("reading the documented policy: %v", err)
	}
	return string(b)
}

// policy is a permission document as JSON keeps it, for tests that take it apart.
type policy struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

type statement struct {
	Sid       string          `json:"Sid"`
	Effect    string          `json:"Effect"`
	Action    json.RawMessage `json:"Action"`
	Resource  json.RawMessage `json:"Resource"`
	Condition json.RawMessage `json:"Condition,omitempty"`
}

func (s statement) actions() []string {
	var one string
	if json.Unmarshal(s.Action, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Action, &many)
	return many
}

func parseDocumented(t testing.TB, file string) policy {
	t.Helper()
	var p policy
	if err := json.Unmarshal([]byte(documentedPolicy(t, file)), &p); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return p
}

func (p policy) json(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// impliedActions are the permissions calls of the backend need besides their own action: a launch with an
// instance profile, and putting the proxy's own role in its profile, pass the role (iam:PassRole); a
// SecureString under a customer-managed key (kms_key_id) is encrypted by SSM as the caller, kms:Encrypt in the
// Standard tier and kms:GenerateDataKey in the Advanced one; the proxy's own instance profile is made with its
// tags (iam:TagInstanceProfile; its role's tags are iam:TagRole, a call of its own too). A load balancer and a
// target group are made with their tags (elasticloadbalancing:AddTags, with elasticloadbalancing:CreateAction),
// a call of its own too, by a label update. sts:GetCallerIdentity needs no permission.
var impliedActions = []string{"iam:PassRole", "iam:TagInstanceProfile", "kms:Encrypt", "kms:GenerateDataKey"}

// calledActions are the IAM actions of every call the backend makes: the methods of its narrow SDK seams
// (api.go), with their services' prefixes, and impliedActions.
func calledActions() []string {
	out := slices.Clone(impliedActions)
	for prefix, seam := range map[string]reflect.Type{
		"ec2": reflect.TypeFor[ec2API](), "ssm": reflect.TypeFor[ssmAPI](), "servicequotas": reflect.TypeFor[quotasAPI](),
		"iam": reflect.TypeFor[iamAPI](), "logs": reflect.TypeFor[logsAPI](), "elasticloadbalancing": reflect.TypeFor[elbAPI](),
	} {
		for i := range seam.NumMethod() {
			out = append(out, prefix+":"+seam.Method(i).Name)
		}
	}
	sort.Strings(out)
	return out
}

// The seams list only what the backend calls: each method is called by the package's code (directly or
// through an SDK paginator), so a method left in a seam cannot grant a permission nothing uses.
func TestSeamsAreCalled(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "api.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	for _, action := range calledActions() {
		prefix, name, _ := strings.Cut(action, ":")
		if slices.Contains(impliedActions, action) {
			continue
		}
		field := map[string]string{"ec2": "ec2", "ssm": "ssm", "servicequotas": "quotas", "iam": "iam", "logs": "logs", "elasticloadbalancing": "elb"}[prefix]
		if !regexp.MustCompile(`\.` + field + `\.` + name + `\(|New` + name + `Paginator\(r\.` + field).MatchString(code.String()) {
			t.Errorf("%s is in the %s seam (api.go) but no code of the backend calls it: remove it, and its permission from %s", name, prefix, CallerPolicyFile)
		}
	}
}

// The documented caller policy allows exactly what the backend calls: every action of its seams and the
// implied ones, and nothing else. A call added without its permission, or a permission left after its call
// went, fails here; the tests, which run with this document only, show that its resources and conditions
// are enough.
func TestCallerPolicyIsWhatTheBackendCalls(t *testing.T) {
	t.Parallel()
	doc := parseDocumented(t, CallerPolicyFile)
	granted := map[string]bool{}
	for _, st := range doc.Statement {
		if st.Effect != "Allow" {
			continue
		}
		for _, a := range st.actions() {
			if strings.ContainsAny(a, "*?") {
				t.Errorf("statement %s grants %s: name each action, least privilege is exact", st.Sid, a)
			}
			granted[a] = true
		}
	}
	called := calledActions()
	for _, a := range called {
		if !granted[a] {
			t.Errorf("the backend calls %s, which %s does not grant: add it", a, CallerPolicyFile)
		}
	}
	for a := range granted {
		if !slices.Contains(called, a) {
			t.Errorf("%s grants %s, which the backend never calls: remove it", CallerPolicyFile, a)
		}
	}
}

// A denial names what the credentials lack, and the document that grants it, from the words each service
// answers a denial with.
func TestMissingPermission(t *testing.T) {
	t.Parallel()
	denial := func(service, operation, code, words string) error {
		return &smithy.OperationError{ServiceID: service, OperationName: operation, Err: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 400}},
			Err:      &smithy.GenericAPIError{Code: code, Message: words},
		}}
	}
	for name, tc := range map[string]struct {
		err                    error
		action, resource, file string
	}{
		"EC2 with IAM's words": {denial("EC2", "RunInstances", "UnauthorizedOperation", "You are not authorized to perform this operation. User: arn:aws:iam::1:user/u "+
			"is not authorized to perform: iam:PassRole on resource: arn:aws:iam::1:role/r because no identity-based policy allows the iam:PassRole action. "+
			"Encoded authorization failure message: abc"), "iam:PassRole", "arn:aws:iam::1:role/r", CallerPolicyFile},
		"EC2 with the encoded message only": {denial("EC2", "TerminateInstances", "UnauthorizedOperation",
			"You are not authorized to perform this operation. Encoded authorization failure message: abc"), "ec2:TerminateInstances", "", CallerPolicyFile},
		"SSM": {denial("SSM", "PutParameter", "AccessDeniedException", "User: arn:aws:iam::1:user/u is not authorized to perform: ssm:PutParameter "+
			"on resource: arn:aws:ssm:eu-west-1:1:parameter/egress-proxy/p/config because no identity-based policy allows the ssm:PutParameter action"),
			"ssm:PutParameter", "arn:aws:ssm:eu-west-1:1:parameter/egress-proxy/p/config", CallerPolicyFile},
		"Service Quotas, no resource": {denial("Service Quotas", "GetServiceQuota", "AccessDeniedException", "User: arn:aws:iam::1:user/u is not authorized to perform: "+
			"servicequotas:GetServiceQuota because no identity-based policy allows the servicequotas:GetServiceQuota action"), "servicequotas:GetServiceQuota", "", CallerPolicyFile},
		"STS": {denial("STS", "AssumeRole", "AccessDenied", "User: arn:aws:iam::1:user/u is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::1:role/d"),
			"sts:AssumeRole", "arn:aws:iam::1:role/d", AssumeRolePolicyFile},
		"no denial": {denial("EC2", "RunInstances", "InvalidParameterValue", "not authorized to perform: ec2:RunInstances"), "", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			action, resource := MissingPermission(tc.err)
			if action != tc.action || resource != tc.resource {
				t.Errorf("MissingPermission = %q on %q, want %q on %q", action, resource, tc.action, tc.resource)
			}
			advice := backend.AdviceOf(classify("aws instance p in region eu-west-1", tc.err))
			if tc.file == "" {
				if advice != "" {
					t.Errorf("advice %q for no denial", advice)
				}
				return
			}
			if !strings.Contains(advice, tc.action) || !strings.Contains(advice, tc.file) {
				t.Errorf("advice %q names not %s and %s", advice, tc.action, tc.file)
			}
		})
	}
}

// testKMSKey is a customer-managed key the scenario's proxy encrypts its secrets with.
const testKMSKey = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"

// everyOperation runs each operation of the backend once, on every path that needs a permission of its own:
// Check (with and without Service Quotas), Create of a Spot proxy with its own Elastic IP, two client ranges
// (the rules quota), its secrets under a customer-managed key and its own CloudWatch Logs group, waited for; Create of a proxy with the user's
// own Elastic IP; Create of a proxy with its own instance role (create_instance_role); an Update of labels; a
// Reconfigure with a range fewer; Create, Reconfigure and an Update of labels of a proxy of three instances
// behind a load balancer; a write of secrets too big for the Standard tier; Get; ListByTag; Delete of
// the three. It stops at the first failure and returns it, with its
// advice. A Check that is not healthy, or that could not read Service Quotas, is a failure.
func everyOperation(t *testing.T, fake *ec2fake.Server, b *Backend) error {
	t.Helper()
	ctx := t.Context()
	failed := func(step string, err error) error {
		return fmt.Errorf("%s: %w (advice: %s)", step, err, backend.AdviceOf(err))
	}
	check := func(step, wantSource, wantMissing string) error {
		for _, h := range b.Check(ctx) {
			if h.Target != testRegion {
				continue
			}
			if h.Healthy != (wantMissing == "") || h.Details[detailQuotaSource] != wantSource || h.Details[detailMissingPermissions] != wantMissing {
				return fmt.Errorf("%s: %s is %s: %v", step, h.Target, h.Reason, h.Details)
			}
		}
		return nil
	}
	admin := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
	theirs, err := admin.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
	if err != nil {
		t.Fatal(err)
	}
	if err := check("check", quotaSourceServiceQuotas, ""); err != nil {
		return err
	}
	a := testSpec(fake, "perm-a")
	a.Proxy.AllowedClientCIDRs = []string{"10.0.0.0/8", "192.168.0.0/16"}
	ao := a.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	ao.StaticEgressIP, ao.Spot, ao.KMSKeyID, ao.WaitForProxy = true, true, testKMSKey, true
	ao.CloudWatchLogs = &CloudWatchLogs{RetentionDays: 7}
	ia, err := b.Create(ctx, a)
	if err != nil {
		return failed("create a proxy with its own Elastic IP", err)
	}
	bs := testSpec(fake, "perm-b")
	bs.Placement.Options.(*Options).EIPAllocationID = awssdk.ToString(theirs.AllocationId) //nolint:forcetypeassert // testSpec's own options
	ib, err := b.Create(ctx, bs)
	if err != nil {
		return failed("create a proxy with the user's Elastic IP", err)
	}
	cs := testSpec(fake, "perm-c")
	co := cs.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	co.IAMInstanceProfile, co.CreateInstanceRole = "", true
	ic, err := b.Create(ctx, cs)
	if err != nil {
		return failed("create a proxy with its own instance role", err)
	}
	a.Labels = map[string]string{"team": "net"}
	if _, err := b.Update(ctx, ia.ID, a); err != nil {
		return failed("update the labels", err)
	}
	s := a.Proxy
	s.AllowedClientCIDRs, s.AllowedDestinations = []string{"10.0.0.0/8"}, []string{"api.example.org"}
	if _, err := b.Reconfigure(ctx, ia.ID, s); err != nil {
		return failed("reconfigure", err)
	}
	r, err := b.clients(ctx, testRegion)
	if err != nil {
		t.Fatal(err)
	}
	big := testSpec(fake, "perm-advanced")
	p := parameters{config: []byte("{}"), secrets: []byte(strings.Repeat("s", maxStandardParameter+1)), configID: "c"}
	if err := b.putParameters(ctx, r, big, newStoredSpec(big.Proxy, Options{KMSKeyID: testKMSKey}, p), p, ""); err != nil {
		return failed("write secrets of the Advanced tier under the customer's key", err)
	}
	if err := b.deleteParameters(ctx, r, big.Name, false); err != nil {
		return failed("delete parameters without an instance", err)
	}
	ha := testSpec(fake, "perm-ha")
	ho := ha.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	ho.SubnetID, ho.Instances = "", 3
	for _, sn := range fake.Subnets(testRegion) {
		ho.SubnetIDs = append(ho.SubnetIDs, sn.ID)
	}
	iha, err := b.Create(ctx, ha)
	if err != nil {
		return failed("create a proxy of three instances behind a load balancer", err)
	}
	if _, err := b.Reconfigure(ctx, iha.ID, s); err != nil {
		return failed("reconfigure a proxy of three instances", err)
	}
	ha.Labels = map[string]string{"team": "net"} // env goes, team comes: RemoveTags and AddTags on the load balancer
	if _, err := b.Update(ctx, iha.ID, ha); err != nil {
		return failed("update the labels of a proxy of three instances", err)
	}
	if _, err := b.Update(ctx, iha.ID, withInstances(ha, 2)); err != nil {
		return failed("change a proxy of three instances to two", err)
	}
	fake.AddImage(testRegion, ec2fake.NewerDebian)
	if _, err := b.Update(ctx, iha.ID, withImage(withInstances(ha, 2), ec2fake.NewerDebian.ID)); err != nil {
		return failed("roll a new image over a proxy of two instances", err)
	}
	if _, err := b.Get(ctx, ia.ID); err != nil {
		return failed("get", err)
	}
	if _, err := b.ListByTag(ctx, backend.Selector{Owner: a.Owner}); err != nil {
		return failed("list", err)
	}
	for _, id := range []backend.ProviderID{ia.ID, ib.ID, ic.ID, iha.ID} {
		if err := b.Delete(ctx, id); err != nil {
			return failed("delete", err)
		}
	}
	// A caller Service Quotas refuses is checked by the account attributes, and told what it lacks.
	fake.Deny("servicequotas:GetServiceQuota")
	return check("check without Service Quotas", quotaSourceAccountAttributes, "servicequotas:GetServiceQuota")
}

// The documented caller policy is enough for every operation.
func TestCallerPolicyIsEnough(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	if err := everyOperation(t, fake, b); err != nil {
		t.Fatal(err)
	}
}

// Each statement of the documented caller policy, and each action of each statement, is needed: without it
// an operation fails, with an error that names the permission and the document that grants it.
func TestEachPermissionIsNeeded(t *testing.T) {
	t.Parallel()
	doc := parseDocumented(t, CallerPolicyFile)
	type removal struct {
		name    string
		doc     policy
		removed []string
	}
	var removals []removal
	// Every statement is removed in every run; of the single actions (about forty, each a whole proxy's life
	// on the fake, the package's costliest test) a run takes one in two, printed and replayable, so that the
	// package stays inside make test's budget on a loaded machine while runs over time take them all.
	actionKept := testutil.Sample(t, "EGRESS_TEST_PERMISSIONS", 2)
	actions := 0
	for i, st := range doc.Statement {
		without := doc
		without.Statement = slices.Delete(slices.Clone(doc.Statement), i, i+1)
		removals = append(removals, removal{"statement " + st.Sid, without, st.actions()})
		if len(st.actions()) < 2 {
			continue
		}
		for _, a := range st.actions() {
			actions++
			if !actionKept(actions - 1) {
				continue
			}
			fewer := doc
			fewer.Statement = slices.Clone(doc.Statement)
			rest := slices.DeleteFunc(slices.Clone(st.actions()), func(b string) bool { return b == a })
			raw, _ := json.Marshal(rest)
			fewer.Statement[i].Action = raw
			removals = append(removals, removal{st.Sid + " without " + a, fewer, []string{a}})
		}
	}
	for _, rm := range removals {
		t.Run(rm.name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{CallerPolicies: []string{rm.doc.json(t)}})
			fake.PlayGuests()
			err := everyOperation(t, fake, b)
			if err == nil {
				t.Fatalf("every operation succeeded without %v: the document grants more than the backend needs", rm.removed)
			}
			if !slices.ContainsFunc(rm.removed, func(a string) bool { return strings.Contains(err.Error(), a) }) {
				t.Errorf("the failure names none of %v:\n%v", rm.removed, err)
			}
			if !strings.Contains(err.Error(), CallerPolicyFile) {
				t.Errorf("the failure does not name %s:\n%v", CallerPolicyFile, err)
			}
			// What only a label update of the load balancer needs fails that step, classified as the denial it is.
			if rm.name == "LoadBalancerChangeAndDeleteOnlyTheProviders without elasticloadbalancing:AddTags" ||
				rm.name == "LoadBalancerChangeAndDeleteOnlyTheProviders without elasticloadbalancing:RemoveTags" {
				if !strings.HasPrefix(err.Error(), "update the labels of a proxy of three instances: ") || backend.ClassOf(err) != backend.ClassPermanent {
					t.Errorf("the failure is not the label update's, Permanent (%s):\n%v", backend.ClassOf(err), err)
				}
			}
		})
	}
}

// What the documented caller policy allows on what it did not make: nothing. Signed with the caller's
// credentials, the changes the backend makes to its own objects are refused on the user's (made by the
// administrator, without the provider's tags), and the same requests without the provider's tags are refused.
func TestCallerPolicyTouchesOnlyWhatTheProviderMade(t *testing.T) {
	t.Parallel()
	fake, _ := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	admin := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
	caller := ec2.NewFromConfig(fake.AWSConfig(testRegion), func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	callerSSM := ssm.NewFromConfig(fake.AWSConfig(testRegion), func(o *ssm.Options) { o.RetryMaxAttempts = 1 })
	subnet := fake.Subnets(testRegion)[0].ID
	launched, err := admin.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(ec2fake.DebianAMI(0, "amd64")), InstanceType: ec2types.InstanceTypeT3Micro,
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), SubnetId: awssdk.String(subnet)})
	if err != nil {
		t.Fatal(err)
	}
	fake.Settle()
	theirs := awssdk.ToString(launched.Instances[0].InstanceId)
	group, err := admin.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: awssdk.String("theirs"), Description: awssdk.String("the users own"),
		VpcId: awssdk.String(fake.Subnets(testRegion)[0].VPCID)})
	if err != nil {
		t.Fatal(err)
	}
	adminSSM := ssm.NewFromConfig(fake.AdminAWSConfig(testRegion))
	if _, err := adminSSM.PutParameter(ctx, &ssm.PutParameterInput{Name: awssdk.String("/egress-proxy/theirs/config"), Value: awssdk.String("v"),
		Type: ssmtypes.ParameterTypeString, Tags: []ssmtypes.Tag{{Key: awssdk.String(backend.LabelManagedBy), Value: awssdk.String("someone-else")}}}); err != nil {
		t.Fatal(err)
	}
	managed := []ec2types.Tag{{Key: awssdk.String(backend.LabelManagedBy), Value: awssdk.String(backend.ManagedByValue)}}
	for name, call := range map[string]func() error{
		"terminate the user's instance": func() error {
			_, err := caller.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{theirs}})
			return err
		},
		"tag the user's instance as the provider's": func() error {
			_, err := caller.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{theirs}, Tags: managed})
			return err
		},
		"make the user's instance's root volume again from an image": func() error {
			_, err := caller.CreateReplaceRootVolumeTask(ctx, &ec2.CreateReplaceRootVolumeTaskInput{InstanceId: awssdk.String(theirs),
				ImageId: awssdk.String(ec2fake.DebianAMI(0, "amd64")), DeleteReplacedRootVolume: awssdk.Bool(true)})
			return err
		},
		"delete the user's security group": func() error {
			_, err := caller.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: group.GroupId})
			return err
		},
		"open the user's security group": func() error {
			_, err := caller.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: group.GroupId,
				IpPermissions: []ec2types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(22), ToPort: awssdk.Int32(22),
					IpRanges: []ec2types.IpRange{{CidrIp: awssdk.String("0.0.0.0/0")}}}}})
			return err
		},
		"launch without the provider's tags": func() error {
			_, err := caller.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(ec2fake.DebianAMI(0, "amd64")), InstanceType: ec2types.InstanceTypeT3Micro,
				MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), SubnetId: awssdk.String(subnet)})
			return err
		},
		"launch with another role": func() error {
			_, err := caller.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(ec2fake.DebianAMI(0, "amd64")), InstanceType: ec2types.InstanceTypeT3Micro,
				MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), SubnetId: awssdk.String(subnet),
				IamInstanceProfile: &ec2types.IamInstanceProfileSpecification{Name: awssdk.String("admin")},
				TagSpecifications:  []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: managed}, {ResourceType: ec2types.ResourceTypeVolume, Tags: managed}}})
			return err
		},
		"delete another tool's parameter under the proxies' path": func() error {
			_, err := callerSSM.DeleteParameters(ctx, &ssm.DeleteParametersInput{Names: []string{"/egress-proxy/theirs/config"}})
			return err
		},
		"read another parameter": func() error {
			_, err := callerSSM.GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String("/aws/service/debian/release/11/latest/amd64")})
			return err
		},
	} {
		err := call()
		var api smithy.APIError
		if !errors.As(err, &api) || (api.ErrorCode() != "UnauthorizedOperation" && api.ErrorCode() != "AccessDeniedException") {
			t.Errorf("%s: %v, want a denial", name, err)
		}
	}
	// The same credentials still make what the provider makes: the policy is not simply empty.
	if _, err := caller.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc,
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: managed}}}); err != nil {
		t.Errorf("allocating a tagged Elastic IP: %v", err)
	}
}

// With the documented instance role policy, the guest's own calls pass, signed with its instance's
// credentials: reading its parameters (the secrets decrypted with the customer's key), reporting applied, and
// making and writing its log stream in its own CloudWatch Logs group.
// Without any one of its statements, the call that needs it is refused, naming the permission.
func TestInstanceRolePolicyIsWhatTheGuestNeeds(t *testing.T) {
	t.Parallel()
	doc := parseDocumented(t, InstanceRolePolicyFile)
	cases := map[string]struct {
		policy, refused string
	}{"the documented policy": {documentedPolicy(t, InstanceRolePolicyFile), ""}}
	for i, st := range doc.Statement {
		without := doc
		without.Statement = slices.Delete(slices.Clone(doc.Statement), i, i+1)
		cases["without "+st.Sid] = struct{ policy, refused string }{without.json(t), st.actions()[0]}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{Roles: []ec2fake.Role{{Name: "egress-proxy", Policy: tc.policy}}})
			fake.PlayGuests()
			spec := testSpec(fake, "guest")
			o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
			o.KMSKeyID, o.CloudWatchLogs = testKMSKey, &CloudWatchLogs{}
			if _, err := b.Create(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			var id string
			for _, in := range fake.Instances(testRegion) {
				id = in.ID
			}
			k, sk, tok := fake.InstanceProfileCredentials("egress-proxy", id, 3600e9)
			cfg := fake.AWSConfig(testRegion)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
			guest := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.RetryMaxAttempts = 1 })
			var names []string
			for _, p := range []string{"config", "secrets", "applied"} {
				names = append(names, "/egress-proxy/guest/"+p)
			}
			_, readErr := guest.GetParameters(t.Context(), &ssm.GetParametersInput{Names: names, WithDecryption: awssdk.Bool(true)})
			_, reportErr := guest.PutParameter(t.Context(), &ssm.PutParameterInput{Name: awssdk.String("/egress-proxy/guest/applied"), Value: awssdk.String("x"),
				Type: ssmtypes.ParameterTypeString, Overwrite: awssdk.Bool(true)})
			logs := cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.RetryMaxAttempts = 1 })
			group, stream := awssdk.String(ownLogGroup("guest")), awssdk.String(logStreamName("guest"))
			_, streamErr := logs.CreateLogStream(t.Context(), &cloudwatchlogs.CreateLogStreamInput{LogGroupName: group, LogStreamName: stream})
			if streamErr != nil {
				// The stream, made by someone else, for the write to be tried whatever CreateLogStream answered.
				admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(testRegion))
				if _, err := admin.CreateLogStream(t.Context(), &cloudwatchlogs.CreateLogStreamInput{LogGroupName: group, LogStreamName: stream}); err != nil {
					t.Fatal(err)
				}
			}
			_, writeErr := logs.PutLogEvents(t.Context(), &cloudwatchlogs.PutLogEventsInput{LogGroupName: group, LogStreamName: stream,
				LogEvents: []cwltypes.InputLogEvent{{Timestamp: awssdk.Int64(fake.Now().UnixMilli()), Message: awssdk.String("{}")}}})
			err := errors.Join(readErr, reportErr, streamErr, writeErr)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("the guest's calls: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), "not authorized to perform: "+tc.refused)):
				t.Errorf("the guest's calls: %v, want %s refused", err, tc.refused)
			}
		})
	}
}

// With assume_role, the configured credentials need only the assume-role policy, and the role the caller
// policy; without the former, egress_backends says what the credentials lack and which document grants it.
func TestAssumeRolePolicy(t *testing.T) {
	t.Parallel()
	for name, policy := range map[string]string{
		"the documented policy": documentedPolicy(t, AssumeRolePolicyFile),
		"without it":            `{"Version": "2012-10-17", "Statement": []}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := ec2fake.New(t, ec2fake.Options{CallerPolicies: []string{policy},
				Roles: []ec2fake.Role{{Name: "egress-deployer", Policy: documentedPolicy(t, CallerPolicyFile)}}})
			creds, err := fake.Credentials().Retrieve(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			region := RegionConfig{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey, AssumeRole: AssumeRole{RoleARN: fake.RoleARN("egress-deployer")},
				EC2Endpoint: fake.URL(), SSMEndpoint: fake.URL(), STSEndpoint: fake.URL(), ServiceQuotasEndpoint: fake.URL(), IAMEndpoint: fake.URL(), LogsEndpoint: fake.URL(), ELBEndpoint: fake.URL()}
			b, err := New(Config{Regions: map[string]RegionConfig{testRegion: region}})
			if err != nil {
				t.Fatal(err)
			}
			h := b.Check(t.Context())[0]
			if strings.HasPrefix(name, "the documented") {
				if !h.Healthy {
					t.Errorf("Check = %s %v, want healthy", h.Reason, h.Details)
				}
				return
			}
			if h.Reason != backend.HealthUnauthorized || h.Details[detailMissingPermissions] != "sts:AssumeRole" ||
				!strings.Contains(h.Details[backend.DetailMessage], AssumeRolePolicyFile) {
				t.Errorf("Check = %s %v, want Unauthorized naming sts:AssumeRole and %s", h.Reason, h.Details, AssumeRolePolicyFile)
			}
		})
	}
}

// egress_backends names what the caller lacks before a create fails: Check reads what it may, probes what a
// Create would ask first (dry runs, reads), and reports each refused permission by name, Degraded, with the
// document to grant; a caller allowed nothing at all is told so too, without a crash.
func TestCheckNamesMissingPermissions(t *testing.T) {
	t.Parallel()
	doc := parseDocumented(t, CallerPolicyFile)
	without := func(sids ...string) string {
		d := doc
		d.Statement = slices.DeleteFunc(slices.Clone(doc.Statement), func(st statement) bool { return slices.Contains(sids, st.Sid) })
		return d.json(t)
	}
	for name, tc := range map[string]struct {
		policy string
		want   string
	}{
		"the documented policy":                 {documentedPolicy(t, CallerPolicyFile), ""},
		"no launch of tagged instances":         {without("LaunchOnlyTaggedInstances"), "ec2:RunInstances"},
		"no tags at creation":                   {without("TagWhatTheProviderMakes"), "ec2:CreateTags"},
		"no groups in VPCs, no proxy parameter": {without("MakeGroupsInVPCs", "ProxyParameters"), "ec2:CreateSecurityGroup, ssm:GetParameters, ssm:ListTagsForResource"},
		"no Debian image":                       {without("ReadTheDebianImageParameter"), "ssm:GetParameter"},
		"no list of log groups":                 {without("LogsListLogGroups"), "logs:DescribeLogGroups"},
		"nothing at all": {`{"Version": "2012-10-17", "Statement": []}`, "ec2:AllocateAddress, ec2:CreateSecurityGroup, ec2:DescribeAccountAttributes, " +
			"ec2:DescribeAddresses, ec2:DescribeInstances, ec2:DescribeSecurityGroups, ec2:DescribeSubnets, logs:DescribeLogGroups, " +
			"servicequotas:GetServiceQuota, ssm:GetParameter, ssm:GetParameters, ssm:ListTagsForResource"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, b := newTest(t, ec2fake.Options{CallerPolicies: []string{tc.policy}})
			for _, h := range b.Check(t.Context()) {
				if h.Target != testRegion {
					continue
				}
				if got := h.Details[detailMissingPermissions]; got != tc.want {
					t.Errorf("missing_permissions = %q, want %q (%v)", got, tc.want, h.Details)
				}
				wantReason := backend.HealthHealthy
				if tc.want != "" {
					wantReason = backend.HealthDegraded
					if msg := h.Details[backend.DetailMessage]; !strings.Contains(msg, tc.want) || !strings.Contains(msg, CallerPolicyFile) {
						t.Errorf("message %q names not %s and %s", msg, tc.want, CallerPolicyFile)
					}
				}
				if h.Reason != wantReason {
					t.Errorf("reason %s, want %s (%v)", h.Reason, wantReason, h.Details)
				}
			}
		})
	}
}
