package ec2fake

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// The rules of IAM's API (README.md, R56 to R62), one test each, driving the fake through the real IAM client
// as TestDocumentedRules does, and the wire against the SDK's own snapshots of it.

// iamClient is an IAM client of the fake signed by cfg's credentials, in IAM's signing region, each call
// made once.
func (h *harness) iamClient(cfg aws.Config) *iam.Client {
	cfg.Region = IAMSigningRegion
	return iam.NewFromConfig(cfg, func(o *iam.Options) { o.RetryMaxAttempts = 1 })
}

func (h *harness) iam() *iam.Client { return h.iamClient(h.s.AWSConfig(IAMSigningRegion)) }

// ec2Trust is the trust policy of a role for EC2 instances.
const ec2Trust = `{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}`

// readParameters is a policy that lets a role read the parameters under /app/.
const readParameters = `{"Version": "2012-10-17", "Statement": [{"Sid": "Read", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:*:*:parameter/app/*"}]}`

// roleWithProfile makes a role of name with policy (none when empty) and a profile of the same name
// holding it.
func (h *harness) roleWithProfile(name, policy string) {
	h.t.Helper()
	c := h.iam()
	_, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String(name), AssumeRolePolicyDocument: aws.String(ec2Trust)})
	h.ok("CreateRole", err)
	if policy != "" {
		_, err = c.PutRolePolicy(h.ctx, &iam.PutRolePolicyInput{RoleName: aws.String(name), PolicyName: aws.String("p"), PolicyDocument: aws.String(policy)})
		h.ok("PutRolePolicy", err)
	}
	_, err = c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String(name)})
	h.ok("CreateInstanceProfile", err)
	_, err = c.AddRoleToInstanceProfile(h.ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: aws.String(name), RoleName: aws.String(name)})
	h.ok("AddRoleToInstanceProfile", err)
}

func TestDocumentedIAMAPIRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R56 IAM's Query API, global, signed for us-east-1": {opts: Options{Regions: []string{"eu-west-1"}}, run: func(h *harness) {
			c := h.iam()
			out, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("web"), AssumeRolePolicyDocument: aws.String(ec2Trust),
				Path: aws.String("/apps/"), Description: aws.String("the web tier"), Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("net")}}})
			h.ok("CreateRole through IAM's endpoint, a region the fake does not serve for EC2", err)
			if aws.ToString(out.Role.Arn) != "arn:aws:iam::"+DefaultAccountID+":role/apps/web" || !strings.HasPrefix(aws.ToString(out.Role.RoleId), "AROA") ||
				aws.ToInt32(out.Role.MaxSessionDuration) != 3600 || out.Role.CreateDate == nil {
				t.Errorf("CreateRole answered %+v", out.Role)
			}
			wrong := h.s.AWSConfig("eu-west-1")
			_, err = iam.NewFromConfig(wrong, func(o *iam.Options) { o.RetryMaxAttempts = 1 }).GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("web")})
			h.fails("IAM signed for eu-west-1", err, "SignatureDoesNotMatch", "Credential should be scoped to a valid region")
			_, err = c.ListRoles(h.ctx, &iam.ListRolesInput{})
			h.failsWith("an action the fake does not serve", err, http.StatusBadRequest, "InvalidAction")
			_, err = c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("bounded"), AssumeRolePolicyDocument: aws.String(ec2Trust),
				PermissionsBoundary: aws.String("arn:aws:iam::aws:policy/ReadOnlyAccess")})
			h.failsWith("a permissions boundary, not modelled", err, http.StatusNotImplemented, "NotImplemented")
		}},
		"R57 names, paths, and unique names": {run: func(h *harness) {
			c := h.iam()
			create := func(name, path string) error {
				in := &iam.CreateRoleInput{RoleName: aws.String(name), AssumeRolePolicyDocument: aws.String(ec2Trust)}
				if path != "" {
					in.Path = aws.String(path)
				}
				_, err := c.CreateRole(h.ctx, in)
				return err
			}
			h.ok("a role name of 64 characters", create(strings.Repeat("r", 64), ""))
			h.fails("a role name of 65", create(strings.Repeat("r", 65), ""), "ValidationError", "Member must have length less than or equal to 64")
			h.fails("a role name with a space", create("my role", ""), "ValidationError", `regular expression pattern: [\w+=,.@-]+`)
			h.fails("a path without its slashes", create("pathless", "apps"), "ValidationError", "at 'path'")
			h.ok("a role", create("Web", ""))
			err := create("web", "/other/")
			h.failsWith("the same name in another case and path", err, http.StatusConflict, "EntityAlreadyExists")
			h.fails("its words", err, "EntityAlreadyExists", "Role with name web already exists.")
			profile := func(name string) error {
				_, err := c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String(name)})
				return err
			}
			h.ok("a profile name of 128 characters", profile(strings.Repeat("p", 128)))
			h.fails("a profile name of 129", profile(strings.Repeat("p", 129)), "ValidationError", "Member must have length less than or equal to 128")
			h.ok("a profile", profile("web"))
			h.fails("a profile of the same name", profile("WEB"), "EntityAlreadyExists", "Instance Profile WEB already exists.")
		}},
		"R58 policy documents": {run: func(h *harness) {
			c := h.iam()
			_, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("bad"), AssumeRolePolicyDocument: aws.String("{not json")})
			h.failsWith("a trust policy that is no JSON", err, http.StatusBadRequest, "MalformedPolicyDocument")
			_, err = c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("huge"), AssumeRolePolicyDocument: aws.String(
				`{"Statement": [{"Effect": "Allow", "Principal": {"AWS": "` + strings.Repeat("a", 2100) + `"}, "Action": "sts:AssumeRole"}]}`)})
			h.fails("a trust policy over 2,048 characters", err, "LimitExceeded", "ACLSizePerRole: 2048")
			_, err = c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("r"), AssumeRolePolicyDocument: aws.String(ec2Trust)})
			h.ok("CreateRole", err)
			put := func(name, doc string) error {
				_, err := c.PutRolePolicy(h.ctx, &iam.PutRolePolicyInput{RoleName: aws.String("r"), PolicyName: aws.String(name), PolicyDocument: aws.String(doc)})
				return err
			}
			h.fails("a policy that is no JSON", put("p", `{"Statement": [`), "MalformedPolicyDocument", "")
			h.failsWith("an element the evaluator does not model", put("p", `{"Statement": [{"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"}]}`),
				http.StatusNotImplemented, "NotImplemented")
			big := func(n int) string {
				return `{"Statement": [{"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:*:*:parameter/` + strings.Repeat("x", n) + `"}]}`
			}
			h.ok("a policy of about 6,000 characters", put("one", big(6000)))
			h.ok("the same one again, replaced (not counted twice)", put("ONE", big(6000)))
			h.fails("two over 10,240 together", put("two", big(5000)), "LimitExceeded", "Maximum policy size of 10240 bytes exceeded for role r")
			h.ok("white space is not counted", put("two", strings.Replace(big(3000), " ", strings.Repeat(" ", 2000), 1)))
		}},
		"R59 missing entities and deletes in order": {run: func(h *harness) {
			c := h.iam()
			_, err := c.GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("nobody")})
			h.failsWith("GetRole of a missing role", err, http.StatusNotFound, "NoSuchEntity")
			h.fails("its words", err, "NoSuchEntity", "The role with name nobody cannot be found.")
			_, err = c.GetInstanceProfile(h.ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String("nobody")})
			h.fails("GetInstanceProfile of a missing one", err, "NoSuchEntity", "Instance Profile nobody cannot be found.")
			h.roleWithProfile("web", readParameters)
			_, err = c.DeleteRolePolicy(h.ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String("web"), PolicyName: aws.String("other")})
			h.fails("DeleteRolePolicy of a policy it has not", err, "NoSuchEntity", "The role policy with name other cannot be found.")
			_, err = c.DeleteRole(h.ctx, &iam.DeleteRoleInput{RoleName: aws.String("web")})
			h.failsWith("DeleteRole with an inline policy", err, http.StatusConflict, "DeleteConflict")
			h.fails("its words", err, "DeleteConflict", "must delete policies first")
			_, err = c.DeleteRolePolicy(h.ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String("web"), PolicyName: aws.String("p")})
			h.ok("DeleteRolePolicy", err)
			_, err = c.DeleteRole(h.ctx, &iam.DeleteRoleInput{RoleName: aws.String("web")})
			h.fails("DeleteRole of a role in a profile", err, "DeleteConflict", "must remove roles from instance profile first")
			_, err = c.DeleteInstanceProfile(h.ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: aws.String("web")})
			h.fails("DeleteInstanceProfile of a profile with a role", err, "DeleteConflict", "must remove roles from instance profile first")
			_, err = c.RemoveRoleFromInstanceProfile(h.ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: aws.String("web"), RoleName: aws.String("other")})
			h.fails("RemoveRoleFromInstanceProfile of a role it has not", err, "NoSuchEntity", "")
			_, err = c.RemoveRoleFromInstanceProfile(h.ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: aws.String("web"), RoleName: aws.String("web")})
			h.ok("RemoveRoleFromInstanceProfile", err)
			_, err = c.DeleteInstanceProfile(h.ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: aws.String("web")})
			h.ok("DeleteInstanceProfile", err)
			_, err = c.DeleteRole(h.ctx, &iam.DeleteRoleInput{RoleName: aws.String("web")})
			h.ok("DeleteRole", err)
			_, err = c.GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("web")})
			h.fails("GetRole of the deleted role", err, "NoSuchEntity", "")
		}},
		"R60 quotas and tags": {opts: Options{MaxRoles: 2, MaxInstanceProfiles: 1}, run: func(h *harness) {
			c := h.iam()
			role := func(name string, tags ...iamtypes.Tag) error {
				_, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String(name), AssumeRolePolicyDocument: aws.String(ec2Trust), Tags: tags})
				return err
			}
			h.ok("a role", role("a"))
			h.fails("a tag of aws:", role("b", iamtypes.Tag{Key: aws.String("aws:x"), Value: aws.String("y")}), "InvalidInput", "aws:")
			many := make([]iamtypes.Tag, 51)
			for i := range many {
				many[i] = iamtypes.Tag{Key: aws.String(string(rune('a'+i%26)) + strings.Repeat("k", i/26+1)), Value: aws.String("v")}
			}
			h.fails("51 tags", role("b", many...), "LimitExceeded", "")
			h.ok("a second role", role("b"))
			h.failsWith("a third over RolesPerAccount", role("c"), http.StatusConflict, "LimitExceeded")
			_, err := c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String("p")})
			h.ok("a profile", err)
			_, err = c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String("q")})
			h.fails("a second over InstanceProfilesPerAccount", err, "LimitExceeded", "InstanceProfilesPerAccount: 1")
			add := func(role string) error {
				_, err := c.AddRoleToInstanceProfile(h.ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: aws.String("p"), RoleName: aws.String(role)})
				return err
			}
			h.ok("a role into the profile", add("a"))
			h.fails("a second role", add("b"), "LimitExceeded", "InstanceSessionsPerInstanceProfile: 1")
			h.fails("the same role again", add("a"), "LimitExceeded", "InstanceSessionsPerInstanceProfile: 1")
			_, err = c.TagRole(h.ctx, &iam.TagRoleInput{RoleName: aws.String("a"), Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("net")}}})
			h.ok("TagRole", err)
			_, err = c.TagRole(h.ctx, &iam.TagRoleInput{RoleName: aws.String("a"), Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("sec")}}})
			h.ok("TagRole of a key it has", err)
			got, err := c.GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("a")})
			h.ok("GetRole", err)
			if len(got.Role.Tags) != 1 || aws.ToString(got.Role.Tags[0].Value) != "sec" {
				t.Errorf("the role's tags read back as %+v, want team=sec alone", got.Role.Tags)
			}
			p, err := c.GetInstanceProfile(h.ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String("p")})
			h.ok("GetInstanceProfile", err)
			if len(p.InstanceProfile.Roles) != 1 || aws.ToString(p.InstanceProfile.Roles[0].RoleName) != "a" {
				t.Errorf("the profile's roles read back as %+v, want a", p.InstanceProfile.Roles)
			}
		}},
		"R61 the caller's policies on IAM": {opts: Options{CallerPolicies: []string{`{"Version": "2012-10-17", "Statement": [
			{"Sid": "Make", "Effect": "Allow", "Action": ["iam:CreateRole", "iam:TagRole"], "Resource": "arn:aws:iam::*:role/app-*",
			 "Condition": {"StringEquals": {"aws:RequestTag/owner": "me"}}},
			{"Sid": "Change", "Effect": "Allow", "Action": ["iam:PutRolePolicy", "iam:DeleteRole"], "Resource": "arn:aws:iam::*:role/app-*",
			 "Condition": {"StringEquals": {"iam:ResourceTag/owner": "me"}}},
			{"Sid": "Profiles", "Effect": "Allow", "Action": ["iam:CreateInstanceProfile", "iam:AddRoleToInstanceProfile"], "Resource": "arn:aws:iam::*:instance-profile/app-*"}]}`}},
			run: func(h *harness) {
				c := h.iam()
				mine := []iamtypes.Tag{{Key: aws.String("owner"), Value: aws.String("me")}}
				_, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("app-web"), AssumeRolePolicyDocument: aws.String(ec2Trust), Tags: mine})
				h.ok("CreateRole with the tag the policy asks", err)
				_, err = c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("app-db"), AssumeRolePolicyDocument: aws.String(ec2Trust)})
				h.failsWith("CreateRole without it", err, http.StatusForbidden, "AccessDenied")
				h.fails("its words", err, "AccessDenied", "is not authorized to perform: iam:CreateRole on resource: arn:aws:iam::"+DefaultAccountID+":role/app-db because no identity-based policy allows")
				_, err = c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("admin"), AssumeRolePolicyDocument: aws.String(ec2Trust), Tags: mine})
				h.fails("CreateRole outside the prefix", err, "AccessDenied", "iam:CreateRole")
				admin := h.iamClient(h.s.AdminAWSConfig(IAMSigningRegion))
				_, err = admin.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("app-theirs"), AssumeRolePolicyDocument: aws.String(ec2Trust)})
				h.ok("the administrator's role of the prefix, without the tag", err)
				_, err = c.PutRolePolicy(h.ctx, &iam.PutRolePolicyInput{RoleName: aws.String("app-web"), PolicyName: aws.String("p"), PolicyDocument: aws.String(readParameters)})
				h.ok("PutRolePolicy on the tagged role", err)
				_, err = c.PutRolePolicy(h.ctx, &iam.PutRolePolicyInput{RoleName: aws.String("app-theirs"), PolicyName: aws.String("p"), PolicyDocument: aws.String(readParameters)})
				h.fails("PutRolePolicy on the untagged one", err, "AccessDenied", "iam:PutRolePolicy on resource: arn:aws:iam::"+DefaultAccountID+":role/app-theirs")
				_, err = c.GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("app-web")})
				h.fails("an action no statement grants", err, "AccessDenied", "iam:GetRole")
				_, err = c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String("app-web")})
				h.ok("CreateInstanceProfile", err)
				_, err = c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String("app-tagged"), Tags: mine})
				h.fails("CreateInstanceProfile with tags needs iam:TagInstanceProfile", err, "AccessDenied", "iam:TagInstanceProfile")
				_, err = c.AddRoleToInstanceProfile(h.ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: aws.String("app-web"), RoleName: aws.String("app-web")})
				h.fails("AddRoleToInstanceProfile needs iam:PassRole on the role", err, "AccessDenied", "iam:PassRole on resource: arn:aws:iam::"+DefaultAccountID+":role/app-web")
			}},
		"R62 an instance of a profile made through the API": {opts: Options{Timing: &Timing{PendingPolls: 1, UnseenProfileLaunches: 2},
			CallerPolicies: []string{`{"Statement": [{"Effect": "Allow", "Action": ["ec2:*", "iam:*"], "Resource": "*"},
				{"Effect": "Deny", "Action": "iam:PassRole", "Resource": "arn:aws:iam::*:role/web", "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}]}`}},
			run: func(h *harness) {
				c := h.iam()
				_, err := c.CreateRole(h.ctx, &iam.CreateRoleInput{RoleName: aws.String("proxy-a"), Path: aws.String("/proxies/"), AssumeRolePolicyDocument: aws.String(ec2Trust)})
				h.ok("CreateRole", err)
				_, err = c.PutRolePolicy(h.ctx, &iam.PutRolePolicyInput{RoleName: aws.String("proxy-a"), PolicyName: aws.String("p"), PolicyDocument: aws.String(readParameters)})
				h.ok("PutRolePolicy", err)
				_, err = c.CreateInstanceProfile(h.ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String("web")})
				h.ok("CreateInstanceProfile", err)
				_, err = c.AddRoleToInstanceProfile(h.ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: aws.String("web"), RoleName: aws.String("proxy-a")})
				h.ok("AddRoleToInstanceProfile", err)
				launch := func() (string, error) {
					out, err := h.launch(func(in *ec2.RunInstancesInput) {
						in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String("web")}
					})
					if err != nil {
						return "", err
					}
					return aws.ToString(out.Instances[0].InstanceId), nil
				}
				for range 2 {
					_, err := launch()
					h.fails("a launch the new profile has not reached yet", err, "InvalidParameterValue", "Invalid IAM Instance Profile name")
				}
				// The launch passes the role the profile holds (proxies/proxy-a), not one of the profile's name,
				// which the caller's policy denies.
				id, err := launch()
				h.ok("a launch once the profile has propagated, passing the role it holds", err)
				h.s.Settle()
				k, sk, tok := h.s.InstanceCredentials(h.region, id, time.Hour)
				cfg := h.s.AWSConfig(h.region)
				cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
				guest := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.RetryMaxAttempts = 1 })
				admin := ssm.NewFromConfig(h.s.AdminAWSConfig(h.region))
				for _, p := range []string{"/app/x", "/other/x"} {
					_, err := admin.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(p), Value: aws.String("v"), Type: "String"})
					h.ok("the administrator's parameter", err)
				}
				_, err = guest.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/app/x")})
				h.ok("the instance reads what its role's inline policy allows", err)
				_, err = guest.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/other/x")})
				h.fails("and nothing else", err, "AccessDeniedException", "assumed-role/proxy-a/"+id+" is not authorized to perform: ssm:GetParameter")
				_, err = c.DeleteRolePolicy(h.ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String("proxy-a"), PolicyName: aws.String("p")})
				h.ok("DeleteRolePolicy", err)
				_, err = guest.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/app/x")})
				h.fails("a role without policies allows nothing", err, "AccessDeniedException", "")
			}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}

// moduleDir is the directory of a module of the build list in the module cache.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
}

// The fake's IAM wire against the SDK's own snapshots of it (request_snapshot/<Action>.request.snap and
// response_snapshot/<Action>.response.snap in the module): the parameters the fake accepts for each action
// are those the SDK's serializer sends, and each element the fake writes in an answer is one the SDK's
// answer names.
func TestIAMWireMatchesSDK(t *testing.T) {
	t.Parallel()
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/iam")
	topRE := regexp.MustCompile(`(?:^|&)([A-Za-z]+)[.=]`)
	for action := range iamActions {
		b, err := os.ReadFile(filepath.Join(dir, "request_snapshot", action+".request.snap"))
		if err != nil {
			t.Errorf("%s: %v", action, err)
			continue
		}
		body := string(b)[strings.LastIndex(string(b), "\n\n")+2:]
		var want []string
		for _, m := range topRE.FindAllStringSubmatch(body, -1) {
			if m[1] != "Action" && m[1] != "Version" && !slices.Contains(want, m[1]) {
				want = append(want, m[1])
			}
		}
		sort.Strings(want)
		if got := slices.Sorted(slices.Values(iamParams[action])); !slices.Equal(got, want) {
			t.Errorf("%s: iamParams %v, the SDK's serializer sends %v", action, got, want)
		}
	}
	// Every element of a full answer of each kind is in the SDK's answer of an action that returns it.
	elementRE := regexp.MustCompile(`<([A-Za-z]+)>`)
	elements := func(action string) []string {
		b, err := os.ReadFile(filepath.Join(dir, "response_snapshot", action+".response.snap"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range elementRE.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
		return out
	}
	h := newHarness(t, Options{})
	h.roleWithProfile("full", readParameters)
	_, err := h.iam().TagRole(h.ctx, &iam.TagRoleInput{RoleName: aws.String("full"), Tags: []iamtypes.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
	h.ok("TagRole", err)
	for action, answer := range map[string]func() any{
		"GetRole":            func() any { return &iamRoleResult{Role: h.s.roleXML(h.s.iamState().roles["full"])} },
		"GetInstanceProfile": func() any { return &iamProfileResult{InstanceProfile: h.s.profileXML(h.s.iamState().profiles["full"])} },
	} {
		rec := httptest.NewRecorder()
		h.s.mu.Lock()
		out := answer()
		h.s.mu.Unlock()
		writeQueryAnswer(rec, iamNamespace, action, out, "id")
		sdk := elements(action)
		for _, m := range elementRE.FindAllStringSubmatch(rec.Body.String(), -1) {
			if !slices.Contains(sdk, m[1]) && m[1] != "ResponseMetadata" && m[1] != "RequestId" {
				t.Errorf("%s: the fake writes <%s>, which the SDK's answer does not name", action, m[1])
			}
		}
	}
	// The trust policy reads back URL-encoded, as IAM answers it.
	got, err := h.iam().GetRole(h.ctx, &iam.GetRoleInput{RoleName: aws.String("full")})
	h.ok("GetRole", err)
	if doc, err := url.QueryUnescape(aws.ToString(got.Role.AssumeRolePolicyDocument)); err != nil || doc != ec2Trust {
		t.Errorf("the trust policy reads back as %q, want %q URL-encoded", aws.ToString(got.Role.AssumeRolePolicyDocument), ec2Trust)
	}
}
