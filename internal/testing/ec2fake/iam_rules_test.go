package ec2fake

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// The rules of the caller's policies (README.md, R51 to R55, and what R5, R42 and R45 gained with them), one
// test each, driving the fake through the real SDK clients as TestDocumentedRules does.

// decoded is the encoded authorization message at the end of an UnauthorizedOperation, decoded.
func decoded(t *testing.T, err error) authorizationMessage {
	t.Helper()
	_, encoded, ok := strings.Cut(err.Error(), "Encoded authorization failure message: ")
	if !ok {
		t.Fatalf("no encoded authorization message in %v", err)
	}
	text, derr := DecodeAuthorizationMessage(encoded)
	if derr != nil {
		t.Fatal(derr)
	}
	var m authorizationMessage
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m authorizationMessage) condition(key string) string {
	for _, c := range m.Context.Conditions.Items {
		if c.Key == key && len(c.Values.Items) > 0 {
			return c.Values.Items[0].Value
		}
	}
	return ""
}

func TestDocumentedIAMRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R51 the caller's policies authorize every request it signs": {opts: Options{CallerPolicies: []string{`{"Version": "2012-10-17", "Statement": [
			{"Sid": "Read", "Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
			{"Sid": "NoSubnets", "Effect": "Deny", "Action": "ec2:describesubnets", "Resource": "*"}]}`,
			`{"Statement": {"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:*:*:parameter/aws/service/debian/*"}}`}}, run: func(h *harness) {
			_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("a Describe action the wildcard allows", err)
			_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter("amd64"))})
			h.ok("an action the second policy allows", err)
			_, err = h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{})
			h.failsWith("an explicit deny (the action's case does not matter)", err, http.StatusForbidden, "UnauthorizedOperation")
			h.fails("an explicit deny", err, "UnauthorizedOperation", "You are not authorized to perform this operation. User: "+h.s.CallerARN()+
				" is not authorized to perform: ec2:DescribeSubnets with an explicit deny in an identity-based policy. Encoded authorization failure message: ")
			if m := decoded(h.t, err); m.Allowed || !m.ExplicitDeny || m.Context.Action != "ec2:DescribeSubnets" || m.Context.Resource != "*" ||
				len(m.MatchedStatements.Items) != 1 || m.MatchedStatements.Items[0].StatementID != "NoSubnets" || m.Context.Principal.ARN != h.s.CallerARN() {
				h.t.Errorf("decoded message %+v", m)
			}
			_, err = h.launch(nil)
			h.failsWith("an action no statement allows", err, http.StatusForbidden, "UnauthorizedOperation")
			h.fails("an action no statement allows", err, "UnauthorizedOperation", "is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:"+
				h.region+":"+h.s.AccountID()+":instance/* because no identity-based policy allows the ec2:RunInstances action. Encoded authorization failure message: ")
			if m := decoded(h.t, err); m.ExplicitDeny || len(m.MatchedStatements.Items) != 0 || m.condition("aws:RequestedRegion") != h.region {
				h.t.Errorf("decoded message %+v", m)
			}
			_, err = h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{DryRun: aws.Bool(true)})
			h.failsWith("R5: a dry run of what is denied", err, http.StatusForbidden, "UnauthorizedOperation")
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{DryRun: aws.Bool(true)})
			h.failsWith("R5: a dry run of what is allowed", err, http.StatusPreconditionFailed, "DryRunOperation")
			_, err = h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p"), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString})
			h.failsWith("SSM", err, http.StatusBadRequest, "AccessDeniedException")
			h.fails("SSM", err, "AccessDeniedException", "User: "+h.s.CallerARN()+" is not authorized to perform: ssm:PutParameter on resource: arn:aws:ssm:"+
				h.region+":"+h.s.AccountID()+":parameter/p because no identity-based policy allows the ssm:PutParameter action")
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.failsWith("Service Quotas", err, http.StatusBadRequest, "AccessDeniedException")
			_, err = h.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("GetCallerIdentity needs no permission", err)
			admin := h.with(h.region, h.s.AdminAWSConfig(h.region))
			_, err = admin.launch(nil)
			h.ok("the administrator, whom no policy limits", err)
			who, err := admin.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("the administrator's identity", err)
			if aws.ToString(who.Arn) != h.s.AdminARN() {
				h.t.Errorf("the administrator is %s, want %s", aws.ToString(who.Arn), h.s.AdminARN())
			}
		}},
		"R52 EC2's resources, request tags and tags at creation": {opts: Options{CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
			{"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": ["arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:*:*:volume/*"],
			 "Condition": {"StringEquals": {"aws:RequestTag/owner": "me"}}},
			{"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": ["arn:aws:ec2:*::image/*", "arn:aws:ec2:*:*:subnet/*", "arn:aws:ec2:*:*:network-interface/*", "arn:aws:ec2:*:*:security-group/*"]},
			{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*", "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}}},
			{"Effect": "Allow", "Action": ["ec2:TerminateInstances", "ec2:CreateTags"], "Resource": "*", "Condition": {"StringEquals": {"aws:ResourceTag/owner": "me"}}}]}`}},
			run: func(h *harness) {
				mine := func(in *ec2.RunInstancesInput) {
					in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("owner", "me")},
						{ResourceType: ec2types.ResourceTypeVolume, Tags: tags("owner", "me")}}
				}
				err := h.launchErr(nil)
				h.fails("a launch without the tag the condition asks", err, "UnauthorizedOperation", "ec2:RunInstances on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":instance/*")
				err = h.launchErr(func(in *ec2.RunInstancesInput) {
					in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("owner", "me")}}
				})
				h.fails("the instance tagged, its volume not", err, "UnauthorizedOperation", "ec2:RunInstances on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":volume/*")
				if m := decoded(h.t, err); m.condition("aws:RequestTag/owner") != "" {
					h.t.Errorf("the volume's request carries the instance's tags: %+v", m)
				}
				id := h.mustLaunch(mine)
				h.s.Settle()
				_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}})
				h.fails("an instance that does not exist: the action's answer, not a denial", err, "InvalidInstanceID.NotFound", "")
				admin := h.with(h.region, h.s.AdminAWSConfig(h.region))
				theirs := admin.mustLaunch(nil)
				_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{theirs}})
				h.fails("an instance without the tag the condition asks", err, "UnauthorizedOperation", "ec2:TerminateInstances on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":instance/"+theirs)
				_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{theirs}, Tags: tags("owner", "me")})
				h.fails("tagging it as mine", err, "UnauthorizedOperation", "ec2:CreateTags on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":instance/"+theirs)
				_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
				h.ok("terminating my own", err)
			}},
		"R52 a group's outbound rules are changed on the group": {opts: Options{CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": ["ec2:CreateSecurityGroup", "ec2:CreateTags"], "Resource": "*"},
			{"Effect": "Allow", "Action": ["ec2:AuthorizeSecurityGroupEgress", "ec2:RevokeSecurityGroupEgress"], "Resource": "arn:aws:ec2:*:*:security-group/*",
			 "Condition": {"StringEquals": {"aws:ResourceTag/owner": "me"}}}]}`}}, run: func(h *harness) {
			rule := []ec2types.IpPermission{{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(443), ToPort: aws.Int32(443), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("10.0.0.0/8")}}}}
			mine, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("mine"), Description: aws.String("d"),
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: tags("owner", "me")}}})
			h.ok("my group", err)
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: mine.GroupId, IpPermissions: rule})
			h.ok("an outbound rule on my group", err)
			_, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: mine.GroupId, IpPermissions: rule})
			h.ok("revoking it", err)
			admin := h.with(h.region, h.s.AdminAWSConfig(h.region))
			theirs, err := admin.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("theirs"), Description: aws.String("d")})
			h.ok("their group", err)
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: theirs.GroupId, IpPermissions: rule})
			h.fails("an outbound rule on a group without the tag", err, "UnauthorizedOperation",
				"ec2:AuthorizeSecurityGroupEgress on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":security-group/"+aws.ToString(theirs.GroupId))
		}},
		"R52 the tags at creation need ec2:CreateTags": {opts: Options{CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": ["ec2:CreateSecurityGroup", "ec2:AllocateAddress"], "Resource": "*"}]}`}}, run: func(h *harness) {
			_, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("an address without tags", err)
			_, err = h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc,
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: tags("k", "v")}}})
			h.fails("an address with tags", err, "UnauthorizedOperation", "ec2:CreateTags on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":elastic-ip/*")
			if m := decoded(h.t, err); m.condition("ec2:CreateAction") != "AllocateAddress" || m.condition("aws:RequestTag/k") != "v" {
				h.t.Errorf("decoded message %+v", m)
			}
			_, err = h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g"), Description: aws.String("d"),
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: tags("k", "v")}}})
			h.fails("a group with tags", err, "UnauthorizedOperation", "ec2:CreateTags on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":security-group/*")
		}},
		"R53 SSM's parameters, Service Quotas' quotas, STS": {opts: Options{Roles: []Role{{Name: "deployer"}, {Name: "other"}}, CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": ["ssm:PutParameter", "ssm:GetParameters"], "Resource": "arn:aws:ssm:*:*:parameter/app/*"},
			{"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:*::parameter/aws/service/debian/*"},
			{"Effect": "Allow", "Action": "ssm:DeleteParameters", "Resource": "arn:aws:ssm:*:*:parameter/app/*",
			 "Condition": {"StringEqualsIfExists": {"aws:ResourceTag/owner": "me"}}},
			{"Effect": "Allow", "Action": "servicequotas:GetServiceQuota", "Resource": "arn:aws:servicequotas:*:*:ec2/L-1216C47A"},
			{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "arn:aws:iam::*:role/deployer"}]}`}}, run: func(h *harness) {
			put := func(name string, tagged ...string) error {
				in := &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString}
				for i := 0; i+1 < len(tagged); i += 2 {
					in.Tags = append(in.Tags, ssmtypes.Tag{Key: aws.String(tagged[i]), Value: aws.String(tagged[i+1])})
				}
				_, err := h.ssm.PutParameter(h.ctx, in)
				return err
			}
			h.ok("a parameter under the path", put("/app/a"))
			h.fails("a parameter elsewhere", put("/other/a"), "AccessDeniedException", "parameter/other/a")
			h.fails("a parameter with tags, without ssm:AddTagsToResource", put("/app/b", "owner", "me"), "AccessDeniedException",
				"ssm:AddTagsToResource on resource: arn:aws:ssm:"+h.region+":"+h.s.AccountID()+":parameter/app/b")
			_, err := h.ssm.GetParameters(h.ctx, &ssm.GetParametersInput{Names: []string{"/app/a", "/app/missing"}})
			h.ok("reading under the path, a name that does not exist among them", err)
			_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter("arm64"))})
			h.ok("AWS's public parameter, whose ARN has no account", err)
			_, err = h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: []string{"/app/a", "/app/missing"}})
			h.ok("untagged and missing parameters: ...IfExists holds", err)
			admin := h.with(h.region, h.s.AdminAWSConfig(h.region))
			_, err = admin.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/app/theirs"), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString,
				Tags: []ssmtypes.Tag{{Key: aws.String("owner"), Value: aws.String("them")}}})
			h.ok("the administrator's parameter", err)
			_, err = h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: []string{"/app/theirs"}})
			h.fails("a parameter tagged for another", err, "AccessDeniedException", "ssm:DeleteParameters on resource: arn:aws:ssm:"+h.region+":"+h.s.AccountID()+":parameter/app/theirs")
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.ok("the quota the policy names", err)
			_, err = h.quota(QuotaElasticIPs)
			h.fails("another quota", err, "AccessDeniedException", "servicequotas:GetServiceQuota on resource: arn:aws:servicequotas:"+h.region+":"+h.s.AccountID()+":ec2/"+QuotaElasticIPs)
			h.assume(&sts.AssumeRoleInput{RoleArn: aws.String(h.s.RoleARN("deployer")), RoleSessionName: aws.String("s1")})
			_, err = h.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: aws.String(h.s.RoleARN("other")), RoleSessionName: aws.String("s1")})
			h.failsWith("a role the policy does not name", err, http.StatusForbidden, "AccessDenied")
			h.fails("a role the policy does not name", err, "AccessDenied", "User: "+h.s.CallerARN()+" is not authorized to perform: sts:AssumeRole on resource: "+h.s.RoleARN("other"))
		}},
		"R54 passing the instance profile's role": {opts: Options{CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*"},
			{"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::*:role/proxy*", "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}]}`}},
			run: func(h *harness) {
				profile := func(name, arn string) func(*ec2.RunInstancesInput) {
					return func(in *ec2.RunInstancesInput) {
						in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{}
						if name != "" {
							in.IamInstanceProfile.Name = aws.String(name)
						} else {
							in.IamInstanceProfile.Arn = aws.String(arn)
						}
					}
				}
				h.ok("the proxies' role by its profile's name", h.launchErr(profile("proxy-a", "")))
				h.ok("by its profile's ARN", h.launchErr(profile("", "arn:aws:iam::"+h.s.AccountID()+":instance-profile/team/proxy-b")))
				err := h.launchErr(profile("admin", ""))
				h.failsWith("another role", err, http.StatusForbidden, "UnauthorizedOperation")
				h.fails("another role", err, "UnauthorizedOperation", "is not authorized to perform: iam:PassRole on resource: "+h.s.RoleARN("admin"))
				if m := decoded(h.t, err); m.condition("iam:PassedToService") != "ec2.amazonaws.com" {
					h.t.Errorf("decoded message %+v", m)
				}
				h.ok("no profile, no role passed", h.launchErr(nil))
			}},
		"R55 KMS through SSM": {opts: Options{CallerPolicies: []string{`{"Statement": [
			{"Effect": "Allow", "Action": ["ssm:PutParameter", "ssm:GetParameter"], "Resource": "*"},
			{"Effect": "Allow", "Action": "kms:Encrypt", "Resource": "arn:aws:kms:*:*:key/*",
			 "Condition": {"StringLike": {"kms:ViaService": "ssm.*.amazonaws.com", "kms:EncryptionContext:PARAMETER_ARN": "arn:aws:ssm:*:*:parameter/s/*"}}}]}`}},
			run: func(h *harness) {
				const key = "1234abcd-12ab-34cd-56ef-1234567890ab"
				put := func(name, keyID, value, tier string) error {
					in := &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(value), Type: ssmtypes.ParameterTypeSecureString, Tier: ssmtypes.ParameterTier(tier)}
					if keyID != "" {
						in.KeyId = aws.String(keyID)
					}
					_, err := h.ssm.PutParameter(h.ctx, in)
					return err
				}
				h.ok("the account's default key: no KMS permission", put("/t/default", "", "v", ""))
				h.ok("a customer key, for a parameter the condition names", put("/s/a", key, "v", ""))
				h.fails("another parameter", put("/t/a", key, "v", ""), "AccessDeniedException",
					"kms:Encrypt on resource: arn:aws:kms:"+h.region+":"+h.s.AccountID()+":key/"+key)
				h.fails("an Advanced parameter", put("/s/big", key, strings.Repeat("v", MaxStandardValueLen+1), "Advanced"), "AccessDeniedException",
					"kms:GenerateDataKey on resource: arn:aws:kms:"+h.region+":"+h.s.AccountID()+":key/"+key)
				_, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/s/a")})
				h.ok("the ciphertext, not decrypted", err)
				_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/s/a"), WithDecryption: aws.Bool(true)})
				h.fails("decrypted", err, "AccessDeniedException", "kms:Decrypt on resource: arn:aws:kms:"+h.region+":"+h.s.AccountID()+":key/"+key)
			}},
		"R42 Deny takes any action from every caller": {run: func(h *harness) {
			h.s.Deny("ec2:RunInstances")
			h.fails("the user", h.launchErr(nil), "UnauthorizedOperation", "ec2:RunInstances")
			admin := h.with(h.region, h.s.AdminAWSConfig(h.region))
			h.fails("the administrator", admin.launchErr(nil), "UnauthorizedOperation", "ec2:RunInstances")
			_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("the other actions", err)
		}},
		"R45 a role's policy authorizes its sessions on every service": {opts: Options{Roles: []Role{{Name: "proxy", Policy: `{"Statement": [
			{"Effect": "Allow", "Action": "ssm:GetParameters", "Resource": "*"}]}`}}}, run: func(h *harness) {
			k, sk, tok := h.s.InstanceProfileCredentials("proxy", "i-0123456789abcdef0", time.Hour)
			cfg := h.s.AWSConfig(h.region)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
			asInstance := h.with(h.region, cfg)
			_, err := asInstance.ssm.GetParameters(h.ctx, &ssm.GetParametersInput{Names: []string{"/p"}})
			h.ok("what it allows", err)
			_, err = asInstance.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.fails("EC2", err, "UnauthorizedOperation", "User: arn:aws:sts::"+h.s.AccountID()+":assumed-role/proxy/i-0123456789abcdef0 is not authorized to perform: ec2:DescribeInstances")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}

// The evaluator's condition semantics ("IAM JSON policy elements: Condition operators"): a key the request has
// not fails a positive operator and passes a negated one and any ...IfExists one; Null tests presence; a
// negated operator's values are NORed; a variable without a value fails the statement.
func TestPolicyConditions(t *testing.T) {
	t.Parallel()
	rc := requestContext{keys: map[string]string{"aws:userid": "AIDA1"}, tags: map[string]string{"team": "net"}}
	for name, tc := range map[string]struct {
		condition string
		want      bool
	}{
		"equals":                      {`{"StringEquals": {"aws:ResourceTag/team": "net"}}`, true},
		"equals, ssm's key, any case": {`{"StringEquals": {"SSM:resourcetag/team": ["sec", "net"]}}`, true},
		"equals, absent":              {`{"StringEquals": {"aws:RequestTag/team": "net"}}`, false},
		"not equals, absent":          {`{"StringNotEquals": {"aws:RequestTag/team": "net"}}`, true},
		"not equals, NOR":             {`{"StringNotEquals": {"aws:ResourceTag/team": ["sec", "net"]}}`, false},
		"not equals, none equal":      {`{"StringNotEquals": {"aws:ResourceTag/team": ["sec", "ops"]}}`, true},
		"if exists, absent":           {`{"StringEqualsIfExists": {"aws:RequestTag/team": "sec"}}`, true},
		"if exists, present":          {`{"StringEqualsIfExists": {"aws:ResourceTag/team": "sec"}}`, false},
		"like":                        {`{"StringLike": {"aws:ResourceTag/team": "n?t*"}}`, true},
		"ignore case":                 {`{"StringEqualsIgnoreCase": {"aws:ResourceTag/team": "NET"}}`, true},
		"null true, absent":           {`{"Null": {"aws:RequestTag/team": "true"}}`, true},
		"null false, absent":          {`{"Null": {"aws:RequestTag/team": "false"}}`, false},
		"variable":                    {`{"StringEquals": {"aws:userid": "${aws:userid}"}}`, true},
		"variable without a value":    {`{"StringNotEquals": {"aws:userid": "${ec2:SourceInstanceARN}"}}`, false},
		"operators ANDed":             {`{"StringEquals": {"aws:ResourceTag/team": "net"}, "Null": {"aws:userid": "true"}}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, err := parsePolicy(`{"Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*", "Condition": ` + tc.condition + `}]}`)
			if err != nil {
				t.Fatal(err)
			}
			if why, _ := evaluate([]policyDocument{d}, "ec2:RunInstances", "*", rc); (why == "") != tc.want {
				t.Errorf("allowed = %t, want %t", why == "", tc.want)
			}
		})
	}
	for name, doc := range map[string]string{
		"NotAction":            `{"Statement": [{"Effect": "Allow", "NotAction": "ec2:*", "Resource": "*"}]}`,
		"Principal":            `{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "ec2:*", "Resource": "*"}]}`,
		"a set qualifier":      `{"Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*", "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": "a"}}}]}`,
		"a numeric operator":   `{"Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*", "Condition": {"NumericLessThan": {"ec2:VolumeSize": "8"}}}]}`,
		"an effect of neither": `{"Statement": [{"Effect": "Permit", "Action": "ec2:*", "Resource": "*"}]}`,
		"an unknown element":   `{"Statement": [], "Comment": "x"}`,
	} {
		if _, err := parsePolicy(doc); err == nil {
			t.Errorf("%s: the policy loaded, want it refused as not modelled", name)
		}
	}
}
