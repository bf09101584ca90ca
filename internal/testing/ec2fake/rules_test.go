package ec2fake

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// One test per rule of README.md, each named by the rule's number there, driving the fake through the real
// SDK clients: the error code, HTTP status and words a client reads, and the state it reads back.

type rule struct {
	opts Options
	run  func(h *harness)
}

func TestDocumentedRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R1 only the served actions": {run: func(h *harness) {
			_, err := h.ec2.DescribeVpcs(h.ctx, &ec2.DescribeVpcsInput{})
			h.failsWith("EC2 DescribeVpcs", err, http.StatusBadRequest, "InvalidAction")
			_, err = h.ssm.DescribeParameters(h.ctx, &ssm.DescribeParametersInput{})
			h.failsWith("SSM DescribeParameters", err, http.StatusBadRequest, "UnknownOperationException")
			_, err = h.sts.GetSessionToken(h.ctx, &sts.GetSessionTokenInput{})
			h.failsWith("STS GetSessionToken", err, http.StatusBadRequest, "InvalidAction")
			_, err = h.sq().ListServiceQuotas(h.ctx, &servicequotas.ListServiceQuotasInput{ServiceCode: aws.String("ec2")})
			h.failsWith("Service Quotas ListServiceQuotas", err, http.StatusBadRequest, "UnknownOperationException")
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.ok("Service Quotas GetServiceQuota", err)
			_, err = h.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("STS GetCallerIdentity", err)
		}},
		"R2 unknown and unmodelled parameters": {run: func(h *harness) {
			bogus := h.with(h.region, h.s.AWSConfig(h.region), withFormParam("Colour=red"))
			_, err := bogus.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.fails("a parameter DescribeInstances has not", err, "UnknownParameter", "The parameter Colour is not recognized")
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.LaunchTemplate = &ec2types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("lt")}
			})
			h.failsWith("a launch template", err, http.StatusNotImplemented, "NotImplemented")
			_, err = h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p"), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString, Policies: aws.String("[]")})
			h.failsWith("parameter policies", err, http.StatusNotImplemented, "NotImplemented")
			// Network interfaces and IPv6, each of which would change the instance's or the rule's addresses.
			for what, edit := range map[string]func(*ec2.RunInstancesInput){
				"a network interface": func(in *ec2.RunInstancesInput) {
					in.NetworkInterfaces = []ec2types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), AssociatePublicIpAddress: aws.Bool(true)}}
				},
				"a private address": func(in *ec2.RunInstancesInput) { in.PrivateIpAddress = aws.String("172.31.0.10") },
				"IPv6 addresses":    func(in *ec2.RunInstancesInput) { in.Ipv6AddressCount = aws.Int32(1) },
				"an IPv6 address": func(in *ec2.RunInstancesInput) {
					in.Ipv6Addresses = []ec2types.InstanceIpv6Address{{Ipv6Address: aws.String("2001:db8::10")}}
				},
				"a primary IPv6": func(in *ec2.RunInstancesInput) { in.EnablePrimaryIpv6 = aws.Bool(true) },
			} {
				_, err = h.launch(edit)
				h.failsWith("RunInstances with "+what, err, http.StatusNotImplemented, "NotImplemented")
			}
			if out, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{}); err != nil || len(out.Reservations) != 0 {
				h.t.Errorf("after refused launches DescribeInstances answers %d reservations, %v", len(out.Reservations), err)
			}
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("allocate", err)
			_, err = h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, NetworkInterfaceId: aws.String("eni-0123456789abcdef0")})
			h.failsWith("AssociateAddress to a network interface", err, http.StatusNotImplemented, "NotImplemented")
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g"), Description: aws.String("d")})
			h.ok("create a group", err)
			for what, p := range map[string]ec2types.IpPermission{
				"an IPv6 range": {Ipv6Ranges: []ec2types.Ipv6Range{{CidrIpv6: aws.String("2001:db8::/32")}}},
				"a prefix list": {PrefixListIds: []ec2types.PrefixListId{{PrefixListId: aws.String("pl-0123456789abcdef0")}}},
			} {
				p.IpProtocol, p.FromPort, p.ToPort = aws.String("tcp"), aws.Int32(3128), aws.Int32(3128)
				_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: []ec2types.IpPermission{p}})
				h.failsWith("a rule with "+what, err, http.StatusNotImplemented, "NotImplemented")
			}
			if got := h.ingress(aws.ToString(g.GroupId)); len(got) != 0 {
				h.t.Errorf("after refused rules the group describes %v", got)
			}
		}},
		"R3 SigV4 with the fake's credentials": {run: func(h *harness) {
			for what, creds := range map[string]aws.CredentialsProvider{
				"unknown key":  credentials.NewStaticCredentialsProvider("AKIAOTHERKEY00000000", DefaultSecretAccessKey, ""),
				"wrong secret": credentials.NewStaticCredentialsProvider(DefaultAccessKeyID, "not-the-secret", ""),
				"unsigned":     aws.AnonymousCredentials{},
			} {
				cfg := h.s.AWSConfig(h.region)
				cfg.Credentials = creds
				o := h.with(h.region, cfg)
				want := map[string][3]string{
					"unknown key":  {"AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId"},
					"wrong secret": {"AuthFailure", "InvalidSignatureException", "SignatureDoesNotMatch"},
					"unsigned":     {"MissingAuthenticationToken", "MissingAuthenticationTokenException", "MissingAuthenticationToken"},
				}[what]
				_, err := o.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
				h.failsWith(what+": EC2", err, http.StatusUnauthorized, want[0])
				_, err = o.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p")})
				h.failsWith(what+": SSM", err, http.StatusBadRequest, want[1])
				_, err = o.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
				h.failsWith(what+": STS", err, http.StatusForbidden, want[2])
				_, err = sqClient(cfg).GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("ec2"), QuotaCode: aws.String(QuotaElasticIPs)})
				h.failsWith(what+": Service Quotas", err, http.StatusBadRequest, want[1])
			}
			if n := len(h.s.Instances(h.region)); n != 0 {
				h.t.Errorf("%d instances after refused requests", n)
			}
		}},
		"R4 regions": {run: func(h *harness) {
			id := h.mustLaunch(nil)
			us := h.in("us-east-1")
			_, err := us.describe(id)
			h.fails("an eu-west-1 instance described in us-east-1", err, "InvalidInstanceID.NotFound", id)
			if n := len(h.s.Instances("us-east-1")); n != 0 {
				h.t.Errorf("us-east-1 holds %d instances", n)
			}
			h.s.SetReachable("us-east-1", false)
			_, err = us.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			if err == nil || codeOf(err) != "" {
				h.t.Errorf("an unreachable region answered: %v", err)
			}
			_, err = h.in("ap-south-2").sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			if err == nil || codeOf(err) != "" {
				h.t.Errorf("a region the fake does not serve answered: %v", err)
			}
			h.s.SetReachable("us-east-1", true)
			_, err = us.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("reachable again", err)
		}},
		"R5 DryRun": {run: func(h *harness) {
			_, err := h.launch(func(in *ec2.RunInstancesInput) { in.DryRun = aws.Bool(true) })
			h.failsWith("RunInstances", err, http.StatusPreconditionFailed, "DryRunOperation")
			if n := len(h.s.Instances(h.region)); n != 0 {
				h.t.Errorf("a dry run launched %d instances", n)
			}
		}},
		"R6 ClientToken idempotency": {run: func(h *harness) {
			first, err := h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String("token-1") })
			h.ok("first", err)
			again, err := h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String("token-1") })
			h.ok("same token, same parameters", err)
			if aws.ToString(again.ReservationId) != aws.ToString(first.ReservationId) ||
				aws.ToString(again.Instances[0].InstanceId) != aws.ToString(first.Instances[0].InstanceId) {
				h.t.Errorf("the repeat answered reservation %s, want %s", aws.ToString(again.ReservationId), aws.ToString(first.ReservationId))
			}
			if n := len(h.s.Instances(h.region)); n != 1 {
				h.t.Errorf("%d instances after a repeated launch, want 1", n)
			}
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.ClientToken = aws.String("token-1")
				in.InstanceType = ec2types.InstanceTypeT3Small
			})
			h.failsWith("same token, other parameters", err, http.StatusBadRequest, "IdempotentParameterMismatch")
			// A token whose instance was terminated is refused, not answered with the old reservation.
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{aws.ToString(first.Instances[0].InstanceId)}})
			h.ok("terminate the first", err)
			h.s.Settle()
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String("token-1") })
			h.failsWith("the token of a terminated instance", err, http.StatusBadRequest, "IdempotentInstanceTerminated")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String(strings.Repeat("t", 65)) })
			h.fails("a token of 65 characters", err, "InvalidParameterValue", "clientToken")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String("jeton-é") })
			h.fails("a token that is not ASCII", err, "InvalidParameterValue", "clientToken")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String(strings.Repeat("t", 64)) })
			h.ok("a token of 64 characters", err)
			other, err := h.in("us-east-1").launch(func(in *ec2.RunInstancesInput) {
				in.ClientToken = aws.String("token-1")
				in.ImageId = aws.String(DebianAMI(1, "amd64"))
			})
			h.ok("the same token in another region", err)
			if aws.ToString(other.ReservationId) == aws.ToString(first.ReservationId) {
				h.t.Error("another region answered the first region's reservation")
			}
		}},
		"R7 MinCount, MaxCount and the instance limits": {opts: Options{MaxInstances: 3}, run: func(h *harness) {
			_, err := h.launch(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(3), aws.Int32(2) })
			h.fails("MinCount above MaxCount", err, "InvalidParameterValue", "minCount")
			out, err := h.launch(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(1), aws.Int32(5) })
			h.ok("1 to 5 under a limit of 3", err)
			if len(out.Instances) != 3 {
				h.t.Errorf("launched %d, want the largest possible number, 3", len(out.Instances))
			}
			_, err = h.launch(nil)
			h.fails("beyond the limit", err, "InstanceLimitExceeded", "your current instance limit of 3")
			for _, in := range out.Instances {
				_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{aws.ToString(in.InstanceId)}})
				h.ok("terminate", err)
			}
			h.s.Settle()
			h.mustLaunch(nil)
		}},
		"R8 images and instance types": {run: func(h *harness) {
			_, err := h.launch(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0123456789abcdef0") })
			h.fails("unknown image", err, "InvalidAMIID.NotFound", "ami-0123456789abcdef0")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("debian-12") })
			h.fails("malformed image id", err, "InvalidAMIID.Malformed", "debian-12")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.InstanceType = ec2types.InstanceTypeT4gMicro })
			h.fails("an x86_64 image on a Graviton type", err, "InvalidParameterValue", "architecture 'arm64'")
			h.mustLaunch(func(in *ec2.RunInstancesInput) {
				in.InstanceType = ec2types.InstanceTypeT4gMicro
				in.ImageId = aws.String(h.debianAMI("arm64"))
			})
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.InstanceType = "tiny" })
			h.fails("unknown instance type", err, "InvalidParameterValue", "InstanceType")
		}},
		"R9 instance states": {opts: Options{Timing: &Timing{PendingPolls: 2, ShuttingDownFor: time.Minute, TerminatedVisibleFor: time.Hour}}, run: func(h *harness) {
			out, err := h.launch(nil)
			h.ok("launch", err)
			id := aws.ToString(out.Instances[0].InstanceId)
			if st := out.Instances[0].State; st.Name != ec2types.InstanceStateNamePending || aws.ToInt32(st.Code) != 0 {
				h.t.Errorf("RunInstances answered %s/%d, want pending/0", st.Name, aws.ToInt32(st.Code))
			}
			for i, want := range []string{StatePending, StatePending, StateRunning} {
				if st := h.state(id); st != want {
					h.t.Errorf("poll %d: %s, want %s", i+1, st, want)
				}
			}
			term, err := h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			h.ok("terminate", err)
			if c := term.TerminatingInstances[0]; c.PreviousState.Name != "running" || c.CurrentState.Name != "shutting-down" {
				h.t.Errorf("terminate: %s -> %s, want running -> shutting-down", c.PreviousState.Name, c.CurrentState.Name)
			}
			if st := h.state(id); st != StateShuttingDown {
				h.t.Errorf("before a minute: %s, want shutting-down", st)
			}
			h.s.Advance(time.Minute)
			if st := h.state(id); st != StateTerminated {
				h.t.Errorf("after a minute: %s, want terminated", st)
			}
			again, err := h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			h.ok("terminating a terminated instance", err)
			if c := again.TerminatingInstances[0]; c.PreviousState.Name != "terminated" || c.CurrentState.Name != "terminated" {
				h.t.Errorf("terminate again: %s -> %s", c.PreviousState.Name, c.CurrentState.Name)
			}
			other := h.mustLaunch(nil)
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{other, "i-0123456789abcdef0"}})
			h.fails("one unknown id among two", err, "InvalidInstanceID.NotFound", "i-0123456789abcdef0")
			if st := h.state(other); st == StateShuttingDown {
				h.t.Error("a failed TerminateInstances terminated the known instance")
			}
			h.s.Advance(time.Hour)
			_, err = h.describe(id)
			h.fails("an hour after termination", err, "InvalidInstanceID.NotFound", id)
		}},
		"R10 eventual consistency": {opts: Options{Timing: &Timing{UnseenPolls: 2}}, run: func(h *harness) {
			id := h.mustLaunch(nil)
			_, err := h.describe(id)
			h.fails("right after RunInstances", err, "InvalidInstanceID.NotFound", id)
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tags("a", "b")})
			h.fails("CreateTags right after", err, "InvalidInstanceID.NotFound", id)
			_, err = h.describe(id)
			h.ok("two calls later", err)
		}},
		"R11 metadata options": {run: func(h *harness) {
			id := h.mustLaunch(func(in *ec2.RunInstancesInput) {
				in.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{
					HttpTokens: ec2types.HttpTokensStateRequired, HttpPutResponseHopLimit: aws.Int32(1), HttpEndpoint: ec2types.InstanceMetadataEndpointStateEnabled,
				}
			})
			in, err := h.describe(id)
			h.ok("describe", err)
			md := in.MetadataOptions
			if md.HttpTokens != ec2types.HttpTokensStateRequired || aws.ToInt32(md.HttpPutResponseHopLimit) != 1 || md.HttpEndpoint != "enabled" {
				h.t.Errorf("metadata options %+v, want required, 1, enabled", md)
			}
			if got, _ := h.s.Instance(h.region, id); got.Metadata.HTTPTokens != "required" || got.Metadata.HopLimit != 1 {
				h.t.Errorf("recorded %+v", got.Metadata)
			}
			def, err := h.describe(h.mustLaunch(nil))
			h.ok("describe", err)
			if md := def.MetadataOptions; md.HttpTokens != "optional" || aws.ToInt32(md.HttpPutResponseHopLimit) != 1 {
				h.t.Errorf("defaults %s, %d, want optional, 1", md.HttpTokens, aws.ToInt32(md.HttpPutResponseHopLimit))
			}
			for _, hop := range []int32{0, 65} {
				_, err = h.launch(func(in *ec2.RunInstancesInput) {
					in.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{HttpPutResponseHopLimit: aws.Int32(hop)}
				})
				h.fails(fmt.Sprint("hop limit ", hop), err, "InvalidParameterValue", "HttpPutResponseHopLimit")
			}
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{HttpTokens: "always"}
			})
			h.fails("HttpTokens always", err, "InvalidParameterValue", "HttpTokens")
		}},
		"R12 tags": {run: func(h *harness) {
			out, err := h.launch(func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{
					{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("Name", "p1", "egress-managed-by", "egress")},
					{ResourceType: ec2types.ResourceTypeVolume, Tags: tags("Name", "p1-root")},
				}
			})
			h.ok("launch with tags", err)
			inst := out.Instances[0]
			id := aws.ToString(inst.InstanceId)
			if got := h.instanceTags(id); got["Name"] != "p1" || got["egress-managed-by"] != "egress" {
				h.t.Errorf("described instance tags %v", got)
			}
			// No action the fake serves describes a volume (R1: the backend never reads one back), so the root
			// volume's tags alone are read from the fake.
			vol, _ := h.s.Volume(h.region, aws.ToString(inst.BlockDeviceMappings[0].Ebs.VolumeId))
			if vol.Tags["Name"] != "p1-root" {
				h.t.Errorf("volume tags %v", vol.Tags)
			}
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tags("Name", "p2", "team", "net")})
			h.ok("CreateTags", err)
			_, err = h.ec2.DeleteTags(h.ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: aws.String("team"), Value: aws.String("sec")}}})
			h.ok("DeleteTags with another value", err)
			if got := h.instanceTags(id); got["Name"] != "p2" || got["team"] != "net" {
				h.t.Errorf("after CreateTags and a DeleteTags of another value: %v", got)
			}
			_, err = h.ec2.DeleteTags(h.ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: aws.String("team")}}})
			h.ok("DeleteTags by key", err)
			if got := h.instanceTags(id); len(got) != 2 || got["team"] != "" {
				h.t.Errorf("after DeleteTags by key: %v", got)
			}
			// Groups, addresses and subnets, each read back by its own Describe; all resources or none.
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("tagged"), Description: aws.String("d")})
			h.ok("CreateSecurityGroup", err)
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("AllocateAddress", err)
			gid, aid, sid := aws.ToString(g.GroupId), aws.ToString(a.AllocationId), h.s.Subnets(h.region)[0].ID
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{gid, aid, sid}, Tags: tags("team", "net")})
			h.ok("CreateTags on a group, an address and a subnet", err)
			if gt, at, st := tagMap(h.group(gid).Tags), tagMap(h.address(aid).Tags), h.subnetTags(sid); gt["team"] != "net" || at["team"] != "net" || st["team"] != "net" {
				h.t.Errorf("described tags: group %v, address %v, subnet %v", gt, at, st)
			}
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{gid, "sg-0123456789abcdef0"}, Tags: tags("half", "done")})
			h.fails("CreateTags naming an unknown group", err, "InvalidGroup.NotFound", "sg-0123456789abcdef0")
			if got := tagMap(h.group(gid).Tags); got["half"] != "" {
				h.t.Errorf("a refused CreateTags tagged the group it could find: %v", got)
			}
			_, err = h.ec2.DeleteTags(h.ctx, &ec2.DeleteTagsInput{Resources: []string{gid, aid}})
			h.ok("DeleteTags without a Tag", err)
			if gt, at := h.group(gid).Tags, h.address(aid).Tags; len(gt) != 0 || len(at) != 0 {
				h.t.Errorf("DeleteTags without a Tag left: group %v, address %v", tagMap(gt), tagMap(at))
			}
			for what, tc := range map[string]struct {
				tags []ec2types.Tag
				code string
			}{
				"key of 129":   {tags(strings.Repeat("k", 129), "v"), "InvalidParameterValue"},
				"value of 257": {tags("k", strings.Repeat("v", 257)), "InvalidParameterValue"},
				"aws: prefix":  {tags("aws:owner", "me"), "InvalidParameterValue"},
				"AWS: prefix":  {tags("AWS:owner", "me"), "InvalidParameterValue"},
				"51 tags":      {manyTags(51), "TagLimitExceeded"},
			} {
				_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tc.tags})
				h.fails("CreateTags "+what, err, tc.code, "")
				_, err = h.launch(func(in *ec2.RunInstancesInput) {
					in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tc.tags}}
				})
				h.fails("TagSpecifications "+what, err, tc.code, "")
			}
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: manyTags(48)})
			h.ok("48 more tags make 50", err)
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tags("one", "more")})
			h.fails("a 51st tag", err, "TagLimitExceeded", "")
			_, err = h.ec2.CreateTags(h.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tags(strings.Repeat("k", 128), strings.Repeat("v", 256))})
			h.fails("128/256 on a full resource", err, "TagLimitExceeded", "")
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags(strings.Repeat("k", 128), strings.Repeat("v", 256))}}
			})
			h.ok("a key of 128 and a value of 256", err)
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeVpc, Tags: tags("a", "b")}}
			})
			h.fails("a VPC tag at launch", err, "InvalidParameterValue", "not a valid taggable resource type")
		}},
		"R13 filters": {opts: Options{Timing: &Timing{PendingPolls: 1000}}, run: func(h *harness) {
			a := h.running(func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("Name", "proxy-a", "egress-managed-by", "egress")}}
			})
			b := h.mustLaunch(func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("Name", "proxy-b")}}
			})
			subnet := h.s.Subnets(h.region)[1]
			c := h.mustLaunch(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String(subnet.ID) })
			for what, tc := range map[string]struct {
				filters []ec2types.Filter
				want    []string
			}{
				"tag:Name":                  {[]ec2types.Filter{flt("tag:Name", "proxy-a")}, []string{a}},
				"tag:Name wildcard":         {[]ec2types.Filter{flt("tag:Name", "proxy-?")}, []string{a, b}},
				"tag-key":                   {[]ec2types.Filter{flt("tag-key", "egress-managed-by")}, []string{a}},
				"instance-state-name":       {[]ec2types.Filter{flt("instance-state-name", "pending")}, []string{b, c}},
				"state OR, tag AND":         {[]ec2types.Filter{flt("instance-state-name", "pending", "running"), flt("tag:Name", "proxy-*")}, []string{a, b}},
				"instance-id":               {[]ec2types.Filter{flt("instance-id", c)}, []string{c}},
				"subnet-id":                 {[]ec2types.Filter{flt("subnet-id", subnet.ID)}, []string{c}},
				"vpc-id":                    {[]ec2types.Filter{flt("vpc-id", subnet.VPCID)}, []string{a, b, c}},
				"no match":                  {[]ec2types.Filter{flt("tag:Name", "proxy")}, nil},
				"instance.group-name":       {[]ec2types.Filter{flt("instance.group-name", "default")}, []string{a, b, c}},
				"escaped wildcard is plain": {[]ec2types.Filter{flt("tag:Name", `proxy-\?`)}, nil},
			} {
				out, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{Filters: tc.filters})
				h.ok(what, err)
				if got := instanceIDs(out); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					h.t.Errorf("%s: %v, want %v", what, got, tc.want)
				}
			}
			_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{flt("colour", "red")}})
			h.fails("unknown filter", err, "InvalidParameterValue", "The filter 'colour' is invalid")
			g, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{flt("group-name", "default"), flt("vpc-id", subnet.VPCID)}})
			h.ok("group-name", err)
			if len(g.SecurityGroups) != 1 {
				h.t.Errorf("group-name and vpc-id found %d groups", len(g.SecurityGroups))
			}
		}},
		"R14 DescribeInstances pagination": {run: func(h *harness) {
			out, err := h.launch(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(7), aws.Int32(7) })
			h.ok("launch 7", err)
			for _, n := range []int32{4, 1001} {
				_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(n)})
				h.fails(fmt.Sprint("MaxResults ", n), err, "InvalidParameterValue", "maxResults")
			}
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: []string{aws.ToString(out.Instances[0].InstanceId)}})
			h.fails("MaxResults with InstanceIds", err, "InvalidParameterCombination", "")
			var seen []string
			pages := ec2.NewDescribeInstancesPaginator(h.ec2, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
			n := 0
			for pages.HasMorePages() {
				page, err := pages.NextPage(h.ctx)
				h.ok("page", err)
				seen = append(seen, instanceIDs(page)...)
				n++
			}
			if len(seen) != 7 || n != 2 {
				h.t.Errorf("%d instances in %d pages, want 7 in 2", len(seen), n)
			}
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: aws.String("bogus")})
			h.fails("a token the fake did not give", err, "InvalidPaginationToken", "")
		}},
		"R15 instance ids": {run: func(h *harness) {
			_, err := h.describe("i-0123456789abcdef0")
			h.failsWith("unknown", err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
			_, err = h.describe("proxy-1")
			h.fails("malformed", err, "InvalidInstanceID.Malformed", "proxy-1")
		}},
		"R16 creating security groups": {run: func(h *harness) {
			vpc := h.s.VPCs(h.region)[0].ID
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{
				GroupName: aws.String("egress-proxy-p1"), Description: aws.String("proxy p1"),
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: tags("Name", "p1")}},
			})
			h.ok("create in the default VPC", err)
			got := h.group(aws.ToString(g.GroupId))
			if aws.ToString(got.VpcId) != vpc || aws.ToString(got.GroupName) != "egress-proxy-p1" || aws.ToString(got.Description) != "proxy p1" || tagMap(got.Tags)["Name"] != "p1" {
				h.t.Errorf("described group %s in %s (%q, tags %v), want egress-proxy-p1 in %s", aws.ToString(got.GroupName), aws.ToString(got.VpcId), aws.ToString(got.Description), tagMap(got.Tags), vpc)
			}
			if egress := permissionList(got.IpPermissionsEgress); len(egress) != 1 || egress[0] != "-1 0-0 0.0.0.0/0" || len(got.IpPermissions) != 0 {
				h.t.Errorf("a new group's described rules: egress %v, ingress %v; want all egress and no ingress", egress, permissionList(got.IpPermissions))
			}
			_, err = h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("EGRESS-proxy-P1"), Description: aws.String("d"), VpcId: aws.String(vpc)})
			h.fails("the same name in another case", err, "InvalidGroup.Duplicate", "already exists")
			other := h.s.SetSubnets(h.region, []Subnet{{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.0.0/24"}})
			_, err = h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d"), VpcId: aws.String(other[0].VPCID)})
			h.ok("the same name in another VPC", err)
			for _, bad := range []string{"sg-proxy", "proxy\u00e9", strings.Repeat("g", 256)} {
				_, err = h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(bad), Description: aws.String("d")})
				h.fails(fmt.Sprintf("name %.12q", bad), err, "InvalidParameterValue", "GroupName")
			}
			_, err = h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("x"), Description: aws.String("d"), VpcId: aws.String("vpc-0123456789abcdef0")})
			h.fails("unknown VPC", err, "InvalidVpcID.NotFound", "")
		}},
		"R16 at most 2,500 groups a region": {run: func(h *harness) {
			start := h.groupCount() // the default VPC's default group
			for i := start; i < MaxSecurityGroups; i++ {
				_, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(fmt.Sprintf("g%d", i)), Description: aws.String("d")})
				h.ok(fmt.Sprintf("group %d of %d", i+1, MaxSecurityGroups), err)
			}
			_, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("one-more"), Description: aws.String("d")})
			h.fails("group 2,501", err, "SecurityGroupLimitExceeded", "")
			if n := h.groupCount(); n != MaxSecurityGroups {
				h.t.Errorf("the region describes %d groups, want %d", n, MaxSecurityGroups)
			}
			_, err = h.in("us-east-1").ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("one-more"), Description: aws.String("d")})
			h.ok("a group in another region", err)
		}},
		"R17 deleting security groups": {run: func(h *harness) {
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d")})
			h.ok("create", err)
			gid := aws.ToString(g.GroupId)
			id := h.running(func(in *ec2.RunInstancesInput) { in.SecurityGroupIds = []string{gid} })
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(gid)})
			h.fails("used by a running instance", err, "DependencyViolation", gid)
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			h.ok("terminate", err)
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(gid)})
			h.fails("used by a shutting-down instance", err, "DependencyViolation", "")
			h.s.Settle()
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(gid)})
			h.ok("once the instance is terminated", err)
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(gid)})
			h.fails("again", err, "InvalidGroup.NotFound", gid)
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupName: aws.String("default")})
			h.fails("the default group", err, "CannotDelete", "")
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String("egress-proxy-p1")})
			h.fails("a name as an id", err, "InvalidGroupId.Malformed", "")
		}},
		"R18 ingress rules": {run: func(h *harness) {
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d")})
			h.ok("create", err)
			gid := g.GroupId
			perm := func(cidrs ...string) []ec2types.IpPermission {
				p := ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(3128), ToPort: aws.Int32(3128)}
				for _, c := range cidrs {
					p.IpRanges = append(p.IpRanges, ec2types.IpRange{CidrIp: aws.String(c)})
				}
				return []ec2types.IpPermission{p}
			}
			out, err := h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm("10.0.0.0/8", "192.168.1.0/24")})
			h.ok("authorize", err)
			if len(out.SecurityGroupRules) != 2 || aws.ToInt32(out.SecurityGroupRules[0].FromPort) != 3128 {
				h.t.Errorf("authorize answered %d rules", len(out.SecurityGroupRules))
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm("172.16.0.0/12", "10.0.0.0/8")})
			h.fails("a rule the group has", err, "InvalidPermission.Duplicate", `peer: 10.0.0.0/8, TCP, from port: 3128, to port: 3128, ALLOW`)
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm("172.16.0.0/12", "172.16.0.0/12")})
			h.fails("a rule twice in one request", err, "InvalidPermission.Duplicate", "")
			if got := h.ingress(aws.ToString(gid)); fmt.Sprint(got) != "[tcp 3128-3128 10.0.0.0/8 tcp 3128-3128 192.168.1.0/24]" {
				h.t.Errorf("after refused requests the group describes %v, want the two rules authorized", got)
			}
			for _, bad := range []string{"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0", "2001:db8::/32", "ten"} {
				_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm(bad)})
				h.fails("CIDR "+bad, err, "InvalidParameterValue", "CIDR block "+bad+" is malformed")
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: gid, IpPermissions: []ec2types.IpPermission{{
				IpProtocol: aws.String("tcp"), FromPort: aws.Int32(4000), ToPort: aws.Int32(3000), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("10.0.0.0/8")}},
			}}})
			h.fails("from above to", err, "InvalidParameterValue", "portRange")
			d, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{aws.ToString(gid)}})
			h.ok("describe", err)
			if p := d.SecurityGroups[0].IpPermissions; len(p) != 1 || len(p[0].IpRanges) != 2 {
				h.t.Errorf("described %d permissions, want one of two ranges", len(p))
			}
			_, err = h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm("172.16.0.0/12")})
			h.ok("revoke an unknown rule in the default VPC", err)
			rev, err := h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: gid, IpPermissions: perm("10.0.0.0/8", "172.16.0.0/12")})
			h.ok("revoke", err)
			if len(rev.UnknownIpPermissions) != 1 || len(rev.RevokedSecurityGroupRules) != 1 {
				h.t.Errorf("revoke answered %d unknown, %d revoked; want 1, 1", len(rev.UnknownIpPermissions), len(rev.RevokedSecurityGroupRules))
			}
			sn := h.s.SetSubnets(h.region, []Subnet{{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.0.0/24"}})
			o, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g"), Description: aws.String("d"), VpcId: aws.String(sn[0].VPCID)})
			h.ok("create in another VPC", err)
			_, err = h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: o.GroupId, IpPermissions: perm("10.0.0.0/8")})
			h.fails("revoke an unknown rule elsewhere", err, "InvalidPermission.NotFound", "")

			// At most 60 rules, a request that would pass them refused whole.
			full, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("full"), Description: aws.String("d")})
			h.ok("create", err)
			fid := aws.ToString(full.GroupId)
			cidrs := func(from, n int) []string {
				var out []string
				for i := from; i < from+n; i++ {
					out = append(out, fmt.Sprintf("10.%d.0.0/16", i))
				}
				return out
			}
			sixty, err := h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: full.GroupId, IpPermissions: perm(cidrs(0, MaxIngressRules)...)})
			h.ok("60 rules", err)
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: full.GroupId, IpPermissions: perm("192.168.0.0/16")})
			h.fails("a 61st rule", err, "RulesPerSecurityGroupLimitExceeded", "")
			if n := len(h.ingress(fid)); n != MaxIngressRules {
				h.t.Errorf("the full group describes %d rules, want %d", n, MaxIngressRules)
			}
			// Revoking by rule id: the ids AuthorizeSecurityGroupIngress answered.
			ids := []string{aws.ToString(sixty.SecurityGroupRules[0].SecurityGroupRuleId), aws.ToString(sixty.SecurityGroupRules[1].SecurityGroupRuleId)}
			_, err = h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: full.GroupId, SecurityGroupRuleIds: []string{ids[0], "sgr-0123456789abcdef0"}})
			h.fails("revoke a rule id the group has not", err, "InvalidSecurityGroupRuleId.NotFound", "sgr-0123456789abcdef0")
			if n := len(h.ingress(fid)); n != MaxIngressRules {
				h.t.Errorf("a refused revoke by id left %d rules, want %d", n, MaxIngressRules)
			}
			byID, err := h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: full.GroupId, SecurityGroupRuleIds: ids})
			h.ok("revoke two rules by id", err)
			var revoked []string
			for _, r := range byID.RevokedSecurityGroupRules {
				revoked = append(revoked, aws.ToString(r.SecurityGroupRuleId))
			}
			if !slices.Equal(revoked, ids) {
				h.t.Errorf("revoked %v, want %v", revoked, ids)
			}
			left := h.ingress(fid)
			if len(left) != MaxIngressRules-2 || slices.Contains(left, "tcp 3128-3128 10.0.0.0/16") || slices.Contains(left, "tcp 3128-3128 10.1.0.0/16") {
				h.t.Errorf("after revoking the rules of 10.0.0.0/16 and 10.1.0.0/16 by id the group describes %d rules: %v", len(left), left)
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: full.GroupId, IpPermissions: perm(cidrs(100, 3)...)})
			h.fails("three rules where two fit", err, "RulesPerSecurityGroupLimitExceeded", "")
			if n := len(h.ingress(fid)); n != MaxIngressRules-2 {
				h.t.Errorf("a refused authorize left %d rules, want %d", n, MaxIngressRules-2)
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: full.GroupId, IpPermissions: perm(cidrs(100, 2)...)})
			h.ok("two where two fit", err)
		}},
		"R19 launch placement": {run: func(h *harness) {
			in, err := h.describe(h.mustLaunch(nil))
			h.ok("describe", err)
			def := h.s.Subnets(h.region)[0]
			for _, sn := range h.s.Subnets(h.region) {
				if sn.AvailabilityZone < def.AvailabilityZone {
					def = sn
				}
			}
			if aws.ToString(in.SubnetId) != def.ID || len(in.SecurityGroups) != 1 || aws.ToString(in.SecurityGroups[0].GroupName) != "default" {
				h.t.Fatalf("no subnet: launched in %s with %v, want %s and its VPC's default group", aws.ToString(in.SubnetId), in.SecurityGroups, def.ID)
			}
			defaultGroup := aws.ToString(in.SecurityGroups[0].GroupId)
			if aws.ToString(in.PublicIpAddress) == "" || aws.ToString(in.PrivateIpAddress) == "" {
				h.t.Errorf("a default subnet's instance has addresses %q and %q", aws.ToString(in.PublicIpAddress), aws.ToString(in.PrivateIpAddress))
			}
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String("subnet-0123456789abcdef0") })
			h.fails("unknown subnet", err, "InvalidSubnetID.NotFound", "")
			sn := h.s.SetSubnets(h.region, append(h.s.Subnets(h.region), Subnet{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.0.0/24"}))
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.SubnetId = aws.String(sn[len(sn)-1].ID)
				in.SecurityGroupIds = []string{defaultGroup}
			})
			h.fails("a group of another VPC", err, "InvalidParameter", "belong to different networks")
		}},
		"R20 subnets": {run: func(h *harness) {
			set := h.s.SetSubnets(h.region, []Subnet{
				{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.1.0/24", AvailabilityZone: "eu-west-1a", Tags: map[string]string{"tier": "public"}},
				{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.2.0/24", AvailabilityZone: "eu-west-1b", Tags: map[string]string{"tier": "private"}},
				{VPCID: "vpc-0bbbbbbbbbbbbbbb2", CIDR: "10.2.1.0/24", AvailabilityZone: "eu-west-1a"},
			})
			for what, tc := range map[string]struct {
				in   ec2.DescribeSubnetsInput
				want int
			}{
				"all":               {ec2.DescribeSubnetsInput{}, 3},
				"vpc-id":            {ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{flt("vpc-id", "vpc-0aaaaaaaaaaaaaaa1")}}, 2},
				"availability-zone": {ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{flt("availability-zone", "eu-west-1a")}}, 2},
				"tag:tier":          {ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{flt("tag:tier", "public")}}, 1},
				"by id":             {ec2.DescribeSubnetsInput{SubnetIds: []string{set[2].ID}}, 1},
			} {
				out, err := h.ec2.DescribeSubnets(h.ctx, &tc.in)
				h.ok(what, err)
				if len(out.Subnets) != tc.want {
					h.t.Errorf("%s: %d subnets, want %d", what, len(out.Subnets), tc.want)
				}
			}
			_, err := h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-0123456789abcdef0"}})
			h.fails("unknown", err, "InvalidSubnetID.NotFound", "")
			_, err = h.launch(nil)
			h.fails("a launch without subnet and no default VPC", err, "VPCIdNotSpecified", "")
		}},
		"R21 allocating Elastic IPs": {opts: Options{MaxElasticIPs: 2}, run: func(h *harness) {
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc,
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: tags("Name", "p1")}}})
			h.ok("allocate", err)
			if a.Domain != ec2types.DomainTypeVpc || aws.ToString(a.PublicIp) == "" {
				h.t.Errorf("allocated %+v", a)
			}
			_, err = h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("second", err)
			_, err = h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.fails("beyond the quota of 2", err, "AddressLimitExceeded", "")
			_, err = h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags("a", "b")}}})
			h.fails("an instance tag on an address", err, "InvalidParameterValue", "taggable")
			for what, tc := range map[string]struct {
				in   ec2.DescribeAddressesInput
				want int
			}{
				"all":           {ec2.DescribeAddressesInput{}, 2},
				"allocation-id": {ec2.DescribeAddressesInput{Filters: []ec2types.Filter{flt("allocation-id", aws.ToString(a.AllocationId))}}, 1},
				"domain":        {ec2.DescribeAddressesInput{Filters: []ec2types.Filter{flt("domain", "vpc")}}, 2},
				"tag:Name":      {ec2.DescribeAddressesInput{Filters: []ec2types.Filter{flt("tag:Name", "p1")}}, 1},
			} {
				out, err := h.ec2.DescribeAddresses(h.ctx, &tc.in)
				h.ok(what, err)
				if len(out.Addresses) != tc.want {
					h.t.Errorf("%s: %d addresses, want %d", what, len(out.Addresses), tc.want)
				}
			}
			_, err = h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{"eipalloc-0123456789abcdef0"}})
			h.fails("unknown allocation", err, "InvalidAllocationID.NotFound", "")
			byIP, err := h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{PublicIps: []string{aws.ToString(a.PublicIp)}})
			h.ok("by public IP", err)
			if len(byIP.Addresses) != 1 || aws.ToString(byIP.Addresses[0].AllocationId) != aws.ToString(a.AllocationId) {
				h.t.Errorf("by public IP %s: %d addresses", aws.ToString(a.PublicIp), len(byIP.Addresses))
			}
			_, err = h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{PublicIps: []string{aws.ToString(a.PublicIp), "192.0.2.7"}})
			h.fails("a public IP the account has not", err, "InvalidAddress.NotFound", "192.0.2.7")
		}},
		"R22 associating Elastic IPs": {run: func(h *harness) {
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("allocate", err)
			pending := h.mustLaunch(nil)
			_, err = h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(pending)})
			h.fails("to a pending instance", err, "IncorrectInstanceState", "not in a valid state")
			h.s.Settle()
			first, err := h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(pending)})
			h.ok("once running", err)
			if in, _ := h.describe(pending); aws.ToString(in.PublicIpAddress) != aws.ToString(a.PublicIp) {
				h.t.Errorf("the instance's public address is %s, want the Elastic IP %s", aws.ToString(in.PublicIpAddress), aws.ToString(a.PublicIp))
			}
			aid := aws.ToString(a.AllocationId)
			if got := h.address(aid); aws.ToString(got.InstanceId) != pending || aws.ToString(got.AssociationId) != aws.ToString(first.AssociationId) {
				h.t.Errorf("described: associated with %q (%q), want %s (%s)", aws.ToString(got.InstanceId), aws.ToString(got.AssociationId), pending, aws.ToString(first.AssociationId))
			}
			other := h.running(nil)
			_, err = h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(other), AllowReassociation: aws.Bool(false)})
			h.fails("AllowReassociation false", err, "Resource.AlreadyAssociated", "")
			if got := h.address(aid); aws.ToString(got.InstanceId) != pending {
				h.t.Errorf("a refused reassociation moved the address to %q", aws.ToString(got.InstanceId))
			}
			second, err := h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(other)})
			h.ok("reassociation is automatic", err)
			if got := h.address(aid); aws.ToString(got.InstanceId) != other || aws.ToString(got.AssociationId) != aws.ToString(second.AssociationId) {
				h.t.Errorf("described: associated with %q (%q), want %s (%s)", aws.ToString(got.InstanceId), aws.ToString(got.AssociationId), other, aws.ToString(second.AssociationId))
			}
			if in, _ := h.describe(pending); aws.ToString(in.PublicIpAddress) == aws.ToString(a.PublicIp) {
				h.t.Error("the first instance kept the Elastic IP")
			}
			if in, _ := h.describe(other); aws.ToString(in.PublicIpAddress) != aws.ToString(a.PublicIp) {
				h.t.Errorf("the second instance's public address is %s, want the Elastic IP %s", aws.ToString(in.PublicIpAddress), aws.ToString(a.PublicIp))
			}
			_, err = h.ec2.DisassociateAddress(h.ctx, &ec2.DisassociateAddressInput{AssociationId: first.AssociationId})
			h.ok("disassociating an ended association", err)
			if got := h.address(aid); aws.ToString(got.InstanceId) != other {
				h.t.Error("disassociating the ended association ended the current one")
			}
			b, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("allocate another", err)
			_, err = h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: b.AllocationId, InstanceId: aws.String(other)})
			h.ok("a second address to the same instance", err)
			if got := h.address(aid); aws.ToString(got.InstanceId) != "" || aws.ToString(got.AssociationId) != "" {
				h.t.Errorf("the instance's earlier Elastic IP stayed associated with %q (%q)", aws.ToString(got.InstanceId), aws.ToString(got.AssociationId))
			}
			if got := h.address(aws.ToString(b.AllocationId)); aws.ToString(got.InstanceId) != other {
				h.t.Errorf("the second address is associated with %q, want %s", aws.ToString(got.InstanceId), other)
			}
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{pending}})
			h.ok("terminate the first instance", err)
			_, err = h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(pending)})
			h.fails("to a shutting-down instance", err, "IncorrectInstanceState", "not in a valid state")
			if got := h.address(aid); aws.ToString(got.InstanceId) != "" {
				h.t.Errorf("a refused association left the address with %q", aws.ToString(got.InstanceId))
			}
		}},
		"R23 releasing Elastic IPs": {run: func(h *harness) {
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("allocate", err)
			id := h.running(nil)
			assoc, err := h.ec2.AssociateAddress(h.ctx, &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(id)})
			h.ok("associate", err)
			_, err = h.ec2.ReleaseAddress(h.ctx, &ec2.ReleaseAddressInput{AllocationId: a.AllocationId})
			h.fails("while associated", err, "InvalidIPAddress.InUse", "")
			_, err = h.ec2.DisassociateAddress(h.ctx, &ec2.DisassociateAddressInput{AssociationId: aws.String("eipassoc-0123456789abcdef0")})
			h.fails("an association that never was", err, "InvalidAssociationID.NotFound", "")
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			h.ok("terminate", err)
			_, err = h.ec2.ReleaseAddress(h.ctx, &ec2.ReleaseAddressInput{AllocationId: a.AllocationId})
			h.fails("while its instance shuts down", err, "InvalidIPAddress.InUse", "")
			h.s.Settle()
			if got := h.address(aws.ToString(a.AllocationId)); aws.ToString(got.InstanceId) != "" || aws.ToString(got.AssociationId) != "" {
				h.t.Errorf("a terminated instance keeps the address: described with %q (%q)", aws.ToString(got.InstanceId), aws.ToString(got.AssociationId))
			}
			_, err = h.ec2.DisassociateAddress(h.ctx, &ec2.DisassociateAddressInput{AssociationId: assoc.AssociationId})
			h.ok("disassociate after the instance ended it", err)
			_, err = h.ec2.ReleaseAddress(h.ctx, &ec2.ReleaseAddressInput{AllocationId: a.AllocationId})
			h.ok("release", err)
			_, err = h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{aws.ToString(a.AllocationId)}})
			h.fails("describe the released address", err, "InvalidAllocationID.NotFound", "")
			_, err = h.ec2.ReleaseAddress(h.ctx, &ec2.ReleaseAddressInput{AllocationId: a.AllocationId})
			h.fails("release again", err, "InvalidAllocationID.NotFound", "")
		}},
		"R24 account attributes": {opts: Options{MaxInstances: 7, MaxElasticIPs: 3}, run: func(h *harness) {
			out, err := h.ec2.DescribeAccountAttributes(h.ctx, &ec2.DescribeAccountAttributesInput{})
			h.ok("all", err)
			got := map[string]string{}
			for _, a := range out.AccountAttributes {
				got[aws.ToString(a.AttributeName)] = aws.ToString(a.AttributeValues[0].AttributeValue)
			}
			if got["max-instances"] != "7" || got["max-elastic-ips"] != "3" || got["vpc-max-elastic-ips"] != "3" || got["default-vpc"] != h.s.VPCs(h.region)[0].ID {
				h.t.Errorf("attributes %v", got)
			}
			one, err := h.ec2.DescribeAccountAttributes(h.ctx, &ec2.DescribeAccountAttributesInput{AttributeNames: []ec2types.AccountAttributeName{"vpc-max-elastic-ips"}})
			h.ok("one", err)
			if len(one.AccountAttributes) != 1 {
				h.t.Errorf("asked one, got %d", len(one.AccountAttributes))
			}
		}},
		"R25 throttling": {opts: Options{Throttle: map[string]Bucket{"DescribeInstances": {Size: 2, RefillPerSecond: 1}, "GetParameter": {Size: 1, RefillPerSecond: 1}, "GetServiceQuota": {Size: 1, RefillPerSecond: 1}, "GetCallerIdentity": {Size: 1, RefillPerSecond: 1}}}, run: func(h *harness) {
			for i := range 2 {
				_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
				h.ok(fmt.Sprint("call ", i+1), err)
			}
			_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.failsWith("the third at once", err, http.StatusServiceUnavailable, "RequestLimitExceeded")
			_, err = h.in("us-east-1").ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("another region's bucket", err)
			_, err = h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{})
			h.ok("another action", err)
			h.s.Advance(time.Second)
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("a second later", err)
			_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter("amd64"))})
			h.ok("SSM first", err)
			_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter("amd64"))})
			h.failsWith("SSM second at once", err, http.StatusBadRequest, "ThrottlingException")
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.ok("Service Quotas first", err)
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.failsWith("Service Quotas second at once", err, http.StatusBadRequest, "TooManyRequestsException")
			_, err = h.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("STS first", err)
			_, err = h.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.failsWith("STS second at once", err, http.StatusBadRequest, "Throttling")
			h.fails("STS second at once", err, "Throttling", "Rate exceeded")
			for _, action := range []string{"DescribeInstances", "GetParameter", "GetServiceQuota", "GetCallerIdentity"} {
				if n := h.s.Throttled(action); n != 1 {
					h.t.Errorf("%s throttled %d times, want 1", action, n)
				}
			}
		}},
		"R26 fault injection": {run: func(h *harness) {
			h.s.FailNext("DescribeInstances", "InternalError")
			_, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.failsWith("FailNext", err, http.StatusInternalServerError, "InternalError")
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("the call after", err)
			h.s.FailNext("RunInstances", "InsufficientInstanceCapacity")
			_, err = h.launch(nil)
			h.fails("capacity", err, "InsufficientInstanceCapacity", "")

			// The SDK's own retries, with the token it made up, survive a lost answer: one instance.
			retrying := ec2.NewFromConfig(h.s.AWSConfig(h.region))
			h.s.LoseNextAnswer("RunInstances")
			out, err := retrying.RunInstances(h.ctx, &ec2.RunInstancesInput{ImageId: aws.String(h.debianAMI("amd64")), InstanceType: "t3.micro", MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
			h.ok("RunInstances across a lost answer", err)
			if n := len(h.s.Instances(h.region)); n != 1 || h.s.Count("RunInstances") != 3 {
				h.t.Errorf("%d instances after %d RunInstances, want 1 after 3 (1 refused, 1 answer lost, 1 retried)", n, h.s.Count("RunInstances"))
			}
			if got := instanceIDsOf(out.Instances); len(got) != 1 || got[0] != h.s.Instances(h.region)[0].ID {
				h.t.Errorf("the retry answered %v", got)
			}
			h.s.StickNextLaunchInPending(1)
			stuck := h.mustLaunch(nil)
			h.s.Settle()
			h.s.Advance(time.Hour)
			if st := h.state(stuck); st != StatePending {
				h.t.Errorf("a stuck instance is %s", st)
			}
			h.s.StickInPending(h.region, stuck, false)
			h.state(stuck)
			if st := h.state(stuck); st != StateRunning {
				h.t.Errorf("released: %s", st)
			}

			// PauseNext holds a request before it is handled: nothing happens while it waits, and dropped it
			// never happens; the client's connection is closed unanswered.
			before := len(h.s.Instances(h.region))
			held := h.s.PauseNext("RunInstances", false)
			done := make(chan error, 1)
			go func() { _, err := h.launch(nil); done <- err }()
			<-held.Reached()
			if n := len(h.s.Instances(h.region)); n != before {
				h.t.Errorf("%d instances while a RunInstances is held before it is handled, want %d", n, before)
			}
			held.Drop()
			if err := <-done; err == nil || codeOf(err) != "" {
				h.t.Errorf("a dropped request answered %v, want a closed connection", err)
			}
			if n := len(h.s.Instances(h.region)); n != before {
				h.t.Errorf("%d instances after a RunInstances was dropped before it was handled, want %d", n, before)
			}
			// Held after it is handled: the change is made while the answer waits, and resumed it is answered.
			held = h.s.PauseNext("RunInstances", true)
			answered := make(chan *ec2.RunInstancesOutput, 1)
			go func() { out, err := h.launch(nil); done <- err; answered <- out }()
			<-held.Reached()
			if n := len(h.s.Instances(h.region)); n != before+1 {
				h.t.Errorf("%d instances while a handled RunInstances waits for its answer, want %d", n, before+1)
			}
			held.Resume()
			h.ok("a resumed RunInstances", <-done)
			if out := <-answered; len(out.Instances) != 1 {
				h.t.Errorf("the resumed RunInstances answered %d instances", len(out.Instances))
			}
			if r := h.s.Requests(); r[len(r)-1].Action != "RunInstances" || r[len(r)-2].Code != "dropped" {
				h.t.Errorf("the request log ends with %+v, want the dropped request then the resumed one", r[len(r)-2:])
			}
		}},
		"R27 PutParameter create and overwrite": {run: func(h *harness) {
			put := func(edit func(*ssm.PutParameterInput)) (*ssm.PutParameterOutput, error) {
				in := &ssm.PutParameterInput{Name: aws.String("/egress-proxy/p1/settings"), Value: aws.String("{}"), Type: ssmtypes.ParameterTypeString}
				if edit != nil {
					edit(in)
				}
				return h.ssm.PutParameter(h.ctx, in)
			}
			out, err := put(func(in *ssm.PutParameterInput) {
				in.Tags = []ssmtypes.Tag{{Key: aws.String("Name"), Value: aws.String("p1")}}
			})
			h.ok("create with tags", err)
			if out.Version != 1 || out.Tier != ssmtypes.ParameterTierStandard {
				h.t.Errorf("created version %d tier %s", out.Version, out.Tier)
			}
			_, err = put(nil)
			h.failsWith("again without Overwrite", err, http.StatusBadRequest, "ParameterAlreadyExists")
			out, err = put(func(in *ssm.PutParameterInput) { in.Overwrite = aws.Bool(true); in.Value = aws.String(`{"a":1}`) })
			h.ok("overwrite", err)
			if out.Version != 2 {
				h.t.Errorf("overwritten version %d, want 2", out.Version)
			}
			if p, err := h.parameter("/egress-proxy/p1/settings"); err != nil || aws.ToString(p.Value) != `{"a":1}` || p.Version != 2 || p.Type != ssmtypes.ParameterTypeString {
				h.t.Errorf("after overwrite GetParameter answers %+v, %v", p, err)
			}
			if tags := h.parameterTags("/egress-proxy/p1/settings"); tags["Name"] != "p1" {
				h.t.Errorf("after overwrite the tags are %v", tags)
			}
			if p, err := h.parameter("/egress-proxy/p1/settings:1"); err != nil || aws.ToString(p.Value) != "{}" {
				h.t.Errorf("version 1 after overwrite: %+v, %v", p, err)
			}
			_, err = put(func(in *ssm.PutParameterInput) {
				in.Overwrite = aws.Bool(true)
				in.Tags = []ssmtypes.Tag{{Key: aws.String("Name"), Value: aws.String("p1")}}
			})
			h.fails("Overwrite with Tags", err, "ValidationException", "tags and overwrite can't be used together")
			_, err = put(func(in *ssm.PutParameterInput) { in.Name = aws.String("/egress-proxy/p2/settings"); in.Type = "" })
			h.fails("create without Type", err, "ValidationException", "type is required")
			_, err = put(func(in *ssm.PutParameterInput) {
				in.Overwrite = aws.Bool(true)
				in.Type = ssmtypes.ParameterTypeSecureString
			})
			h.fails("change the type", err, "HierarchyTypeMismatchException", "")
			if p, err := h.parameter("/egress-proxy/p1/settings"); err != nil || p.Type != ssmtypes.ParameterTypeString || p.Version != 2 {
				h.t.Errorf("after a refused change of type: %+v, %v", p, err)
			}
			out, err = put(func(in *ssm.PutParameterInput) { in.Overwrite = aws.Bool(true); in.Type = "" })
			h.ok("overwrite without Type keeps it", err)
			if out.Version != 3 {
				h.t.Errorf("version %d, want 3", out.Version)
			}
			if p, err := h.parameter("/egress-proxy/p1/settings"); err != nil || p.Type != ssmtypes.ParameterTypeString || p.Version != 3 {
				h.t.Errorf("after an overwrite without Type: %+v, %v", p, err)
			}
			_, err = h.parameter("/egress-proxy/p2/settings")
			h.fails("the parameter created without Type", err, "ParameterNotFound", "")
			_, err = put(func(in *ssm.PutParameterInput) { in.Name = aws.String("/p/empty"); in.Value = aws.String("") })
			h.fails("empty value", err, "ValidationException", "value")
			_, err = put(func(in *ssm.PutParameterInput) {
				in.Name = aws.String("/p/nested")
				in.Value = aws.String("{{ssm:/other}}")
			})
			h.fails("a nested parameter", err, "ValidationException", "can't nest another parameter")
			_, err = put(func(in *ssm.PutParameterInput) {
				in.Name, in.Value, in.AllowedPattern = aws.String("/p/digits"), aws.String("12a"), aws.String(`^\d+$`)
			})
			h.fails("AllowedPattern", err, "ParameterPatternMismatchException", "")
			for _, refused := range []string{"/p/empty", "/p/nested", "/p/digits"} {
				_, err = h.parameter(refused)
				h.fails("the refused "+refused, err, "ParameterNotFound", "")
			}
		}},
		"R28 parameter names": {run: func(h *harness) {
			put := func(name string) error {
				_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString})
				return err
			}
			prefix := "arn:aws:ssm:eu-west-1:" + DefaultAccountID + ":parameter/"
			fits := "/" + strings.Repeat("n", MaxParameterNameLen-len(prefix))
			h.ok("a name at 1011 with its ARN", put(fits))
			h.fails("one character more", put(fits+"n"), "ValidationException", "1011")
			for _, bad := range []string{"/aws/mine", "/AWS/mine", "/ssm-params/x", "awsome", "/egress proxy/x", "/egress/x*", "egress/x", "/egress//x"} {
				h.fails(bad, put(bad), "ValidationException", "")
			}
			h.ok("fifteen levels", put("/l1/l2/l3/l4/l5/l6/l7/l8/l9/l10/l11/l12/l13/l14/l15"))
			h.fails("sixteen levels", put("/l1/l2/l3/l4/l5/l6/l7/l8/l9/l10/l11/l12/l13/l14/l15/l16"), "HierarchyLevelLimitExceededException", "")
			h.ok("a plain name", put("egress_proxy.v1-x"))
			h.ok("spaces around are trimmed", put("  /egress-proxy/trimmed  "))
			if p, err := h.parameter("/egress-proxy/trimmed"); err != nil || aws.ToString(p.Name) != "/egress-proxy/trimmed" {
				h.t.Errorf("the trimmed name reads %+v, %v", p, err)
			}
			if p, err := h.parameter(fits); err != nil || aws.ToString(p.Value) != "v" {
				h.t.Errorf("the name at 1011 reads %+v, %v", p, err)
			}
			out, err := h.ssm.GetParametersByPath(h.ctx, &ssm.GetParametersByPathInput{Path: aws.String("/l1"), Recursive: aws.Bool(true)})
			h.ok("GetParametersByPath /l1", err)
			if len(out.Parameters) != 1 || aws.ToString(out.Parameters[0].Name) != "/l1/l2/l3/l4/l5/l6/l7/l8/l9/l10/l11/l12/l13/l14/l15" {
				h.t.Errorf("under /l1: %d parameters, want the one of fifteen levels alone", len(out.Parameters))
			}
		}},
		"R29 tiers and value sizes": {opts: Options{MaxStandardParameters: 2}, run: func(h *harness) {
			put := func(name string, size int, tier ssmtypes.ParameterTier, overwrite bool) (*ssm.PutParameterOutput, error) {
				return h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(strings.Repeat("x", size)), Type: ssmtypes.ParameterTypeString, Tier: tier, Overwrite: aws.Bool(overwrite)})
			}
			_, err := put("/p/std", MaxStandardValueLen, "", false)
			h.ok("4096 bytes in Standard", err)
			_, err = put("/p/big", MaxStandardValueLen+1, "", false)
			h.fails("4097 bytes in Standard", err, "ValidationException", "Standard tier parameters support a maximum parameter value of 4096 characters")
			out, err := put("/p/big", MaxAdvancedValueLen, ssmtypes.ParameterTierAdvanced, false)
			h.ok("8192 bytes in Advanced", err)
			if out.Tier != ssmtypes.ParameterTierAdvanced {
				h.t.Errorf("tier %s", out.Tier)
			}
			_, err = put("/p/big", MaxAdvancedValueLen+1, ssmtypes.ParameterTierAdvanced, true)
			h.fails("8193 bytes in Advanced", err, "ValidationException", "8192")
			_, err = put("/p/big", 10, ssmtypes.ParameterTierStandard, true)
			h.fails("Advanced back to Standard", err, "ValidationException", "can't downgrade")
			out, err = put("/p/big", 10, "", true)
			h.ok("overwrite without a tier", err)
			if out.Tier != ssmtypes.ParameterTierAdvanced {
				h.t.Errorf("an Advanced parameter overwritten without a tier is %s", out.Tier)
			}
			out, err = put("/p/smart", MaxStandardValueLen+1, ssmtypes.ParameterTierIntelligentTiering, false)
			h.ok("Intelligent-Tiering", err)
			if out.Tier != ssmtypes.ParameterTierAdvanced {
				h.t.Errorf("a large Intelligent-Tiering value landed in %s", out.Tier)
			}
			_, err = put("/p/std2", 1, "", false)
			h.ok("the second standard parameter", err)
			_, err = put("/p/std3", 1, "", false)
			h.fails("a third under a quota of 2", err, "ParameterLimitExceeded", "")
		}},
		"R30 SecureString": {run: func(h *harness) {
			_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/egress-proxy/p1/secrets"), Value: aws.String("htpasswd-line"), Type: ssmtypes.ParameterTypeSecureString})
			h.ok("put", err)
			enc, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/egress-proxy/p1/secrets")})
			h.ok("get without decryption", err)
			if v := aws.ToString(enc.Parameter.Value); v == "htpasswd-line" || strings.Contains(v, "htpasswd") || v == "" {
				h.t.Errorf("without WithDecryption the value reads %q", v)
			}
			dec, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/egress-proxy/p1/secrets"), WithDecryption: aws.Bool(true)})
			h.ok("get with decryption", err)
			if aws.ToString(dec.Parameter.Value) != "htpasswd-line" || dec.Parameter.Type != ssmtypes.ParameterTypeSecureString {
				h.t.Errorf("with WithDecryption: %q %s", aws.ToString(dec.Parameter.Value), dec.Parameter.Type)
			}
			if p, _ := h.s.Parameter(h.region, "/egress-proxy/p1/secrets"); p.KeyID != DefaultParameterKey {
				h.t.Errorf("key %q, want %s", p.KeyID, DefaultParameterKey)
			}
		}},
		"R31 reading parameters": {run: func(h *harness) {
			for _, v := range []string{"a", "b"} {
				_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p/x"), Value: aws.String(v), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
				h.ok("put "+v, err)
			}
			_, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p/missing")})
			h.failsWith("missing", err, http.StatusBadRequest, "ParameterNotFound")
			old, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p/x:1")})
			h.ok("version 1", err)
			if aws.ToString(old.Parameter.Value) != "a" || aws.ToString(old.Parameter.Selector) != ":1" {
				h.t.Errorf("version 1 reads %q %q", aws.ToString(old.Parameter.Value), aws.ToString(old.Parameter.Selector))
			}
			_, err = h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p/x:9")})
			h.fails("version 9", err, "ParameterVersionNotFound", "")
			many, err := h.ssm.GetParameters(h.ctx, &ssm.GetParametersInput{Names: []string{"/p/x", "/p/missing"}})
			h.ok("GetParameters", err)
			if len(many.Parameters) != 1 || fmt.Sprint(many.InvalidParameters) != "[/p/missing]" || aws.ToString(many.Parameters[0].Value) != "b" {
				h.t.Errorf("GetParameters: %d found, invalid %v", len(many.Parameters), many.InvalidParameters)
			}
			_, err = h.ssm.GetParameters(h.ctx, &ssm.GetParametersInput{Names: strings.Split("a b c d e f g h i j k", " ")})
			h.fails("eleven names", err, "ValidationException", "")
		}},
		"R32 deleting parameters": {run: func(h *harness) {
			_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p/x"), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString})
			h.ok("put", err)
			out, err := h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: []string{"/p/x", "/p/missing"}})
			h.ok("delete", err)
			if fmt.Sprint(out.DeletedParameters, out.InvalidParameters) != "[/p/x] [/p/missing]" {
				h.t.Errorf("deleted %v, invalid %v", out.DeletedParameters, out.InvalidParameters)
			}
			_, err = h.parameter("/p/x")
			h.fails("the deleted parameter", err, "ParameterNotFound", "")
			_, err = h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: strings.Split("a b c d e f g h i j k", " ")})
			h.fails("eleven names", err, "ValidationException", "")
			_, err = h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: []string{}})
			h.fails("no name", err, "ValidationException", "")
		}},
		"R33 parameter tags": {run: func(h *harness) {
			_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p/x"), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString})
			h.ok("put", err)
			add := func(id string, ts ...ssmtypes.Tag) error {
				_, err := h.ssm.AddTagsToResource(h.ctx, &ssm.AddTagsToResourceInput{ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: aws.String(id), Tags: ts})
				return err
			}
			tag := func(k, v string) ssmtypes.Tag { return ssmtypes.Tag{Key: aws.String(k), Value: aws.String(v)} }
			h.ok("add", add("/p/x", tag("Name", "p1"), tag("egress-owner", "me@example.com")))
			h.ok("overwrite one", add("/p/x", tag("Name", "p2")))
			list, err := h.ssm.ListTagsForResource(h.ctx, &ssm.ListTagsForResourceInput{ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: aws.String("/p/x")})
			h.ok("list", err)
			if len(list.TagList) != 2 || aws.ToString(list.TagList[0].Key) != "Name" || aws.ToString(list.TagList[0].Value) != "p2" {
				h.t.Errorf("tags %v", list.TagList)
			}
			h.fails("an unknown parameter", add("/p/missing", tag("a", "b")), "InvalidResourceId", "")
			h.fails("aws: prefix", add("/p/x", tag("aws:x", "b")), "ValidationException", "")
			h.fails("a key of 129", add("/p/x", tag(strings.Repeat("k", 129), "b")), "ValidationException", "")
			h.fails("a value with a comma", add("/p/x", tag("k", "a,b")), "ValidationException", "")
			var ts []ssmtypes.Tag
			for i := range 49 {
				ts = append(ts, tag(fmt.Sprint("k", i), "v"))
			}
			h.fails("51 tags in all", add("/p/x", ts...), "TooManyTagsError", "")
		}},
		"R34 GetParametersByPath": {run: func(h *harness) {
			for _, name := range []string{"/egress-proxy/p1/settings", "/egress-proxy/p1/config", "/egress-proxy/p1/deep/x", "/egress-proxy/p2/settings", "/egress-proxy/p10/settings"} {
				_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString})
				h.ok("put "+name, err)
			}
			names := func(in *ssm.GetParametersByPathInput) []string {
				var out []string
				pages := ssm.NewGetParametersByPathPaginator(h.ssm, in)
				for pages.HasMorePages() {
					page, err := pages.NextPage(h.ctx)
					h.ok("page", err)
					for _, p := range page.Parameters {
						out = append(out, aws.ToString(p.Name))
					}
				}
				return out
			}
			if got := names(&ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy/p1")}); fmt.Sprint(got) != "[/egress-proxy/p1/config /egress-proxy/p1/settings]" {
				h.t.Errorf("one level: %v", got)
			}
			if got := names(&ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy/p1/"), Recursive: aws.Bool(true)}); len(got) != 3 {
				h.t.Errorf("recursive: %v", got)
			}
			if got := names(&ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy"), Recursive: aws.Bool(true), MaxResults: aws.Int32(2)}); len(got) != 5 {
				h.t.Errorf("in pages of 2: %v", got)
			}
			page, err := h.ssm.GetParametersByPath(h.ctx, &ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy"), Recursive: aws.Bool(true), MaxResults: aws.Int32(2)})
			h.ok("first page", err)
			if len(page.Parameters) != 2 || page.NextToken == nil {
				h.t.Errorf("first page: %d, token %v", len(page.Parameters), page.NextToken)
			}
			for _, n := range []int32{0, 11} {
				_, err = h.ssm.GetParametersByPath(h.ctx, &ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy"), MaxResults: aws.Int32(n)})
				h.fails(fmt.Sprint("MaxResults ", n), err, "ValidationException", "maxResults")
			}
			_, err = h.ssm.GetParametersByPath(h.ctx, &ssm.GetParametersByPathInput{Path: aws.String("/egress-proxy"), NextToken: aws.String("bogus")})
			h.fails("a token the fake did not give", err, "InvalidNextToken", "")
			if got := names(&ssm.GetParametersByPathInput{Path: aws.String("/"), Recursive: aws.Bool(true)}); len(got) != 5 {
				h.t.Errorf("the root holds %v, want the account's 5 (not AWS's public ones)", got)
			}
			if got := names(&ssm.GetParametersByPathInput{Path: aws.String("/aws/service/debian/release/12/latest")}); len(got) != 2 {
				h.t.Errorf("Debian's public path holds %v", got)
			}
		}},
		"R35 Debian's public parameters": {run: func(h *harness) {
			for _, arch := range []string{"amd64", "arm64"} {
				out, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter(arch))})
				h.ok(arch, err)
				ami := aws.ToString(out.Parameter.Value)
				itype := ec2types.InstanceTypeT3Micro
				if arch == "arm64" {
					itype = ec2types.InstanceTypeT4gMicro
				}
				h.mustLaunch(func(in *ec2.RunInstancesInput) { in.ImageId, in.InstanceType = aws.String(ami), itype })
			}
			_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(DebianParameter("amd64")), Value: aws.String("ami-0123456789abcdef0"), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
			h.fails("overwriting a public parameter", err, "ValidationException", "")
			us, err := h.in("us-east-1").ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(DebianParameter("amd64"))})
			h.ok("us-east-1", err)
			if aws.ToString(us.Parameter.Value) != DebianAMI(1, "amd64") {
				h.t.Errorf("us-east-1's image %s", aws.ToString(us.Parameter.Value))
			}
		}},
		"R36 GetCallerIdentity": {opts: Options{AccountID: "210987654321", Roles: []Role{{Name: "deployer"}}}, run: func(h *harness) {
			out, err := h.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("GetCallerIdentity", err)
			if aws.ToString(out.Account) != "210987654321" || aws.ToString(out.Arn) != "arn:aws:iam::210987654321:user/ec2fake" {
				h.t.Errorf("identity %s %s", aws.ToString(out.Account), aws.ToString(out.Arn))
			}
			session := h.assume(&sts.AssumeRoleInput{RoleArn: aws.String(h.s.RoleARN("deployer")), RoleSessionName: aws.String("ci-run")})
			out, err = session.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("GetCallerIdentity of a role session", err)
			if aws.ToString(out.Arn) != "arn:aws:sts::210987654321:assumed-role/deployer/ci-run" || aws.ToString(out.Account) != "210987654321" ||
				!strings.HasPrefix(aws.ToString(out.UserId), "AROA") || !strings.HasSuffix(aws.ToString(out.UserId), ":ci-run") {
				h.t.Errorf("a role session's identity: %s %s %s", aws.ToString(out.Account), aws.ToString(out.Arn), aws.ToString(out.UserId))
			}
		}},
		"R37 AssumeRole parameters": {opts: Options{Roles: []Role{{Name: "deployer"}}}, run: func(h *harness) {
			role := h.s.RoleARN("deployer")
			for what, tc := range map[string]struct {
				in    sts.AssumeRoleInput
				code  string
				words string
			}{
				"a session name too short": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("a")}, "ValidationError",
					"1 validation error detected: Value 'a' at 'roleSessionName' failed to satisfy constraint: Member must have length greater than or equal to 2"},
				"a session name too long": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String(strings.Repeat("s", 65))}, "ValidationError",
					"Member must have length less than or equal to 64"},
				"a space in the session name": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("ci run")}, "ValidationError",
					`Member must satisfy regular expression pattern: [\w+=,.@-]*`},
				"a session shorter than 15 minutes": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("ci"), DurationSeconds: aws.Int32(899)}, "ValidationError",
					"at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900"},
				"a session longer than 12 hours": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("ci"), DurationSeconds: aws.Int32(43201)}, "ValidationError",
					"Member must have value less than or equal to 43200"},
				"an external id too short": {sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("ci"), ExternalId: aws.String("x")}, "ValidationError",
					"at 'externalId' failed to satisfy constraint: Member must have length greater than or equal to 2"},
				"two errors": {sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::1"), RoleSessionName: aws.String("a")}, "ValidationError",
					"2 validation errors detected: Value 'arn:aws:iam::1' at 'roleArn' failed to satisfy constraint: Member must have length greater than or equal to 20; Value 'a' at 'roleSessionName'"},
				"not a role's ARN": {sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:s3:::deployment-bucket"), RoleSessionName: aws.String("ci")}, "ValidationError",
					"Request ARN is invalid"},
			} {
				_, err := h.sts.AssumeRole(h.ctx, &tc.in)
				h.fails(what, err, tc.code, tc.words)
				if err != nil && statusOf(err) != http.StatusBadRequest {
					h.t.Errorf("%s: HTTP status %d, want 400", what, statusOf(err))
				}
			}
			_, err := h.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("ci"), Policy: aws.String("{}")})
			h.failsWith("a session policy", err, http.StatusNotImplemented, "NotImplemented")
			if n := len(h.s.Sessions()); n != 0 {
				h.t.Errorf("%d sessions opened by refused requests", n)
			}
			// Without DurationSeconds a session lasts one hour; a session name may hold every character its
			// pattern allows.
			out, err := h.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: &role, RoleSessionName: aws.String("a+b=c,d.e@f-g_h")})
			h.ok("AssumeRole", err)
			if got, want := aws.ToTime(out.Credentials.Expiration), h.s.Now().Add(time.Hour); !got.Equal(want) {
				h.t.Errorf("a session without DurationSeconds expires at %v, want %v", got, want)
			}
		}},
		"R38 which roles may be assumed": {opts: Options{Roles: []Role{{Name: "deployer"}, {Name: "partner", ExternalID: "ext-2f9c", MaxSessionDuration: 2 * time.Hour}}}, run: func(h *harness) {
			deployer, partner := h.s.RoleARN("deployer"), h.s.RoleARN("partner")
			assume := func(arn, externalID string, seconds int32) (*sts.AssumeRoleOutput, error) {
				in := &sts.AssumeRoleInput{RoleArn: aws.String(arn), RoleSessionName: aws.String("ci"), DurationSeconds: aws.Int32(seconds)}
				if externalID != "" {
					in.ExternalId = aws.String(externalID)
				}
				return h.sts.AssumeRole(h.ctx, in)
			}
			denied := func(what string, err error, arn string) {
				h.t.Helper()
				h.failsWith(what, err, http.StatusForbidden, "AccessDenied")
				h.fails(what, err, "AccessDenied", "User: "+h.s.CallerARN()+" is not authorized to perform: sts:AssumeRole on resource: "+arn)
			}
			for what, arn := range map[string]string{
				"a role the account does not have": h.s.RoleARN("admin"),
				"a role of another account":        "arn:aws:iam::999999999999:role/deployer",
				"the role under another path":      "arn:aws:iam::" + h.s.AccountID() + ":role/ops/deployer",
			} {
				_, err := assume(arn, "", 900)
				denied(what, err, arn)
			}
			_, err := assume(partner, "", 900)
			denied("without the external id the role asks for", err, partner)
			_, err = assume(partner, "ext-0000", 900)
			denied("with another external id", err, partner)
			_, err = assume(partner, "ext-2f9c", 7200)
			h.ok("with the external id, for the role's maximum session", err)
			_, err = assume(partner, "ext-2f9c", 7201)
			h.fails("beyond the role's maximum session", err, "ValidationError", "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
			_, err = assume(deployer, "ext-unasked", 3600)
			h.ok("an external id the role does not ask for", err)
			_, err = assume(deployer, "", 3601)
			h.fails("beyond the default maximum of one hour", err, "ValidationError", "exceeds the MaxSessionDuration")

			// Role chaining: a role session may assume another role, for at most one hour.
			chained := h.assume(&sts.AssumeRoleInput{RoleArn: aws.String(deployer), RoleSessionName: aws.String("first")})
			_, err = chained.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: aws.String(partner), RoleSessionName: aws.String("second"), ExternalId: aws.String("ext-2f9c"), DurationSeconds: aws.Int32(3601)})
			h.fails("a chained session beyond one hour", err, "ValidationError", "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining.")
			_, err = chained.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: aws.String(partner), RoleSessionName: aws.String("second"), ExternalId: aws.String("ext-2f9c"), DurationSeconds: aws.Int32(3600)})
			h.ok("a chained session of one hour", err)
			sessions := h.s.Sessions()
			if last := sessions[len(sessions)-1]; last.CallerAccessKey != sessions[len(sessions)-2].AccessKeyID || last.AssumedRoleARN != "arn:aws:sts::"+h.s.AccountID()+":assumed-role/partner/second" {
				h.t.Errorf("the chained session %+v: want it opened with the first session's key %s", last, sessions[len(sessions)-2].AccessKeyID)
			}
		}},
		"R39 temporary credentials": {opts: Options{Roles: []Role{{Name: "deployer"}}}, run: func(h *harness) {
			out, err := h.sts.AssumeRole(h.ctx, &sts.AssumeRoleInput{RoleArn: aws.String(h.s.RoleARN("deployer")), RoleSessionName: aws.String("ci"), DurationSeconds: aws.Int32(900)})
			h.ok("AssumeRole", err)
			c := out.Credentials
			key, secret, token := aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken)
			if !strings.HasPrefix(key, "ASIA") || len(key) != 20 || secret == "" || token == "" || !aws.ToTime(c.Expiration).Equal(h.s.Now().Add(15*time.Minute)) {
				h.t.Errorf("credentials %s, %q, %q, expiring %v: want an ASIA key of 20 characters, a secret and a token, for 15 minutes", key, secret, token, c.Expiration)
			}
			with := func(key, secret, token string) *harness {
				cfg := h.s.AWSConfig(h.region)
				cfg.Credentials = credentials.NewStaticCredentialsProvider(key, secret, token)
				return h.with(h.region, cfg)
			}
			session := with(key, secret, token)
			_, err = session.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("EC2 with the session's credentials", err)
			_, err = session.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/aws/service/debian/release/12/latest/amd64")})
			h.ok("SSM with the session's credentials", err)
			if r := h.s.Requests(); r[len(r)-1].AccessKey != key || r[len(r)-1].Action != "GetParameter" || r[0].AccessKey != DefaultAccessKeyID {
				h.t.Errorf("the request log names keys %s (AssumeRole) and %s (%s), want %s and %s", r[0].AccessKey, r[len(r)-1].AccessKey, r[len(r)-1].Action, DefaultAccessKeyID, key)
			}
			for what, o := range map[string]*harness{
				"without the session token":       with(key, secret, ""),
				"with another session token":      with(key, secret, token+"x"),
				"the fake's own key with a token": with(DefaultAccessKeyID, DefaultSecretAccessKey, token),
			} {
				_, err := o.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
				h.failsWith(what+": EC2", err, http.StatusUnauthorized, "AuthFailure")
				_, err = o.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p")})
				h.failsWith(what+": SSM", err, http.StatusBadRequest, "UnrecognizedClientException")
				_, err = o.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
				h.failsWith(what+": STS", err, http.StatusForbidden, "InvalidClientTokenId")
			}
			_, err = with(key, "not-the-secret", token).sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.failsWith("the session's key with another secret", err, http.StatusForbidden, "SignatureDoesNotMatch")
			// Expired on the fake's clock: every service refuses them; the fake's own still work.
			h.s.Advance(15 * time.Minute)
			_, err = session.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.failsWith("expired: EC2", err, http.StatusBadRequest, "RequestExpired")
			_, err = session.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p")})
			h.failsWith("expired: SSM", err, http.StatusBadRequest, "ExpiredTokenException")
			_, err = session.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.failsWith("expired: STS", err, http.StatusForbidden, "ExpiredToken")
			_, err = h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{})
			h.ok("the fake's own credentials", err)
		}},
		"R40 instance profile credentials": {run: func(h *harness) {
			key, secret, token := h.s.InstanceProfileCredentials("egress-proxy-role", "i-0a1b2c3d4e5f60718", 10*time.Minute)
			cfg := h.s.AWSConfig(h.region)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(key, secret, token)
			guest := h.with(h.region, cfg)
			who, err := guest.sts.GetCallerIdentity(h.ctx, &sts.GetCallerIdentityInput{})
			h.ok("STS with the instance's credentials", err)
			if want := "arn:aws:sts::" + h.s.AccountID() + ":assumed-role/egress-proxy-role/i-0a1b2c3d4e5f60718"; aws.ToString(who.Arn) != want {
				h.t.Errorf("the instance's credentials are %s, want %s", aws.ToString(who.Arn), want)
			}
			_, err = guest.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/aws/service/debian/release/12/latest/amd64")})
			h.ok("SSM with the instance's credentials", err)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(DefaultAccessKeyID, DefaultSecretAccessKey, token)
			_, err = h.with(h.region, cfg).ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p")})
			h.failsWith("the fake's own key with the instance's token", err, http.StatusBadRequest, "UnrecognizedClientException")
			h.s.Advance(10 * time.Minute)
			_, err = guest.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String("/p")})
			h.failsWith("past their lifetime", err, http.StatusBadRequest, "ExpiredTokenException")
		}},
		"R41 Service Quotas GetServiceQuota": {opts: Options{MaxVCPUs: 12, MaxSpotVCPUs: 6, MaxElasticIPs: 3}, run: func(h *harness) {
			for code, want := range map[string]struct {
				name  string
				value float64
				class string
			}{
				QuotaOnDemandStandardVCPUs: {"Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", 12, "Standard/OnDemand"},
				QuotaSpotStandardVCPUs:     {"All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", 6, "Standard/Spot"},
				QuotaElasticIPs:            {"EC2-VPC Elastic IPs", 3, ""},
			} {
				out, err := h.quota(code)
				h.ok(code, err)
				q := out.Quota
				if aws.ToString(q.QuotaName) != want.name || aws.ToFloat64(q.Value) != want.value || aws.ToString(q.Unit) != "None" ||
					aws.ToString(q.QuotaCode) != code || aws.ToString(q.ServiceCode) != "ec2" || !q.Adjustable || q.GlobalQuota ||
					aws.ToString(q.QuotaArn) != "arn:aws:servicequotas:eu-west-1:"+h.s.AccountID()+":ec2/"+code {
					h.t.Errorf("%s = %s %v %s (code %s, service %s, adjustable %v, global %v, %s), want %s %v None, adjustable, regional",
						code, aws.ToString(q.QuotaName), aws.ToFloat64(q.Value), aws.ToString(q.Unit), aws.ToString(q.QuotaCode), aws.ToString(q.ServiceCode),
						q.Adjustable, q.GlobalQuota, aws.ToString(q.QuotaArn), want.name, want.value)
				}
				if want.class != "" && (q.UsageMetric == nil || q.UsageMetric.MetricDimensions["Class"] != want.class || q.UsageMetric.MetricDimensions["Resource"] != "vCPU") {
					h.t.Errorf("%s usage metric %+v, want the vCPUs of class %s", code, q.UsageMetric, want.class)
				}
			}
			// The Elastic IP quota is the account attribute's, and the limit AllocateAddress enforces (R21).
			attrs, err := h.ec2.DescribeAccountAttributes(h.ctx, &ec2.DescribeAccountAttributesInput{AttributeNames: []ec2types.AccountAttributeName{"vpc-max-elastic-ips"}})
			h.ok("DescribeAccountAttributes", err)
			if v := aws.ToString(attrs.AccountAttributes[0].AttributeValues[0].AttributeValue); v != "3" {
				h.t.Errorf("vpc-max-elastic-ips = %s, want the quota's 3", v)
			}
			us, err := h.in("us-east-1").quota(QuotaElasticIPs)
			h.ok("us-east-1", err)
			if arn := aws.ToString(us.Quota.QuotaArn); !strings.Contains(arn, ":us-east-1:") {
				h.t.Errorf("us-east-1's quota is %s", arn)
			}
			_, err = h.quota("L-00000000")
			h.failsWith("an unknown quota code", err, http.StatusBadRequest, "NoSuchResourceException")
			_, err = h.sq().GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("lambda"), QuotaCode: aws.String("L-B99A9384")})
			h.failsWith("a service the fake has no quota of", err, http.StatusBadRequest, "NoSuchResourceException")
			_, err = h.quota("L_1216C47A")
			h.failsWith("a malformed quota code", err, http.StatusBadRequest, "IllegalArgumentException")
			_, err = h.sq().GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("ec2"), QuotaCode: aws.String(QuotaOnDemandStandardVCPUs),
				ContextId: aws.String("arn:aws:ec2:eu-west-1:" + h.s.AccountID() + ":instance/i-0123456789abcdef0")})
			h.failsWith("a resource-level quota", err, http.StatusNotImplemented, "NotImplemented")
		}},
		"R42 a caller without servicequotas:GetServiceQuota": {run: func(h *harness) {
			_, err := h.quota(QuotaOnDemandStandardVCPUs)
			h.ok("allowed", err)
			h.s.Deny("servicequotas:GetServiceQuota")
			_, err = h.quota(QuotaOnDemandStandardVCPUs)
			h.failsWith("denied", err, http.StatusBadRequest, "AccessDeniedException")
			h.fails("denied", err, "AccessDeniedException", "User: "+h.s.CallerARN()+" is not authorized to perform: servicequotas:GetServiceQuota")
			_, err = h.ec2.DescribeAccountAttributes(h.ctx, &ec2.DescribeAccountAttributesInput{})
			h.ok("EC2 still answers", err)
		}},
		"R43 vCPU quotas and CPU options": {opts: Options{MaxVCPUs: 8, MaxSpotVCPUs: 4}, run: func(h *harness) {
			big := h.mustLaunch(func(in *ec2.RunInstancesInput) { in.InstanceType = ec2types.InstanceTypeM5Xlarge })
			out, err := h.launch(func(in *ec2.RunInstancesInput) { in.MaxCount = aws.Int32(5) })
			h.ok("1 to 5 t3.micro with 4 vCPUs left", err)
			if len(out.Instances) != 2 {
				h.t.Errorf("launched %d t3.micro, want the 2 that 4 vCPUs hold", len(out.Instances))
			}
			_, err = h.launch(nil)
			h.failsWith("2 vCPUs more under a quota of 8", err, http.StatusBadRequest, "VcpuLimitExceeded")
			h.fails("2 vCPUs more under a quota of 8", err, "VcpuLimitExceeded", "more vCPU capacity than your current vCPU limit of 8 allows")
			spot := func(in *ec2.RunInstancesInput) {
				in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeSpot}
				in.InstanceType = ec2types.InstanceTypeT3Medium
			}
			h.mustLaunch(spot)
			h.mustLaunch(spot)
			_, err = h.launch(spot)
			h.fails("a third 2-vCPU Spot instance under a Spot quota of 4", err, "MaxSpotInstanceCountExceeded", "")
			h.mustLaunch(func(in *ec2.RunInstancesInput) { in.InstanceType = ec2types.InstanceTypeG5Xlarge })

			for id, want := range map[string][2]int32{big: {2, 2}, aws.ToString(out.Instances[0].InstanceId): {1, 2}} {
				in, err := h.describe(id)
				h.ok("describe", err)
				if in.CpuOptions == nil || aws.ToInt32(in.CpuOptions.CoreCount) != want[0] || aws.ToInt32(in.CpuOptions.ThreadsPerCore) != want[1] {
					h.t.Errorf("%s %s CpuOptions %+v, want %d cores of %d threads", in.InstanceType, id, in.CpuOptions, want[0], want[1])
				}
			}

			// A terminated instance's vCPUs are free again.
			_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{big}})
			h.ok("terminate the m5.xlarge", err)
			h.s.Settle()
			graviton := h.mustLaunch(func(in *ec2.RunInstancesInput) {
				in.InstanceType = ec2types.InstanceTypeT4gMedium
				in.ImageId = aws.String(h.debianAMI("arm64"))
			})
			if in, err := h.describe(graviton); err != nil || aws.ToInt32(in.CpuOptions.CoreCount) != 2 || aws.ToInt32(in.CpuOptions.ThreadsPerCore) != 1 {
				h.t.Errorf("t4g.medium CpuOptions %+v, %v; want 2 cores of 1 thread", in.CpuOptions, err)
			}
			h.mustLaunch(nil)
			_, err = h.launch(nil)
			h.fails("the quota full again", err, "VcpuLimitExceeded", "")
			_, err = h.launch(func(in *ec2.RunInstancesInput) {
				in.CpuOptions = &ec2types.CpuOptionsRequest{CoreCount: aws.Int32(1), ThreadsPerCore: aws.Int32(1)}
			})
			h.failsWith("CPU options at launch", err, http.StatusNotImplemented, "NotImplemented")
		}},
		"R45 a role's policy, evaluated for its sessions' SSM requests": {opts: Options{Roles: []Role{{Name: "proxy", Policy: `{"Statement": [
			{"Effect": "Allow", "Action": "ssm:GetParameter*", "Resource": "arn:aws:ssm:*:*:parameter/p/*",
			 "Condition": {"StringEquals": {"ssm:resourceTag/bound": "${ec2:SourceInstanceARN}"}}},
			{"Effect": "Deny", "Action": "ssm:*", "Resource": "arn:aws:ssm:*:*:parameter/p/denied"}]}`}}}, run: func(h *harness) {
			arn := "arn:aws:ec2:" + h.region + ":" + h.s.AccountID() + ":instance/i-0123456789abcdef0"
			for name, tag := range map[string]string{"/p/mine": arn, "/p/other": "arn:aws:ec2:" + h.region + ":" + h.s.AccountID() + ":instance/i-1", "/p/denied": arn} {
				_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String("v"), Type: ssmtypes.ParameterTypeString,
					Tags: []ssmtypes.Tag{{Key: aws.String("bound"), Value: aws.String(tag)}}})
				h.ok("put "+name+" as the account's user, whom no policy limits", err)
			}
			k, sk, tok := h.s.InstanceProfileCredentials("proxy", "i-0123456789abcdef0", time.Hour)
			cfg := h.s.AWSConfig(h.region)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
			asInstance := ssm.NewFromConfig(cfg)
			get := func(names ...string) error {
				_, err := asInstance.GetParameters(h.ctx, &ssm.GetParametersInput{Names: names})
				return err
			}
			h.ok("its own parameter, the tag naming its instance", get("/p/mine"))
			err := get("/p/mine", "/p/other")
			h.failsWith("one of the names bound to another instance", err, http.StatusBadRequest, "AccessDeniedException")
			h.fails("one of the names bound to another instance", err, "AccessDeniedException", "is not authorized to perform: ssm:GetParameters on resource: arn:aws:ssm:"+h.region+":"+h.s.AccountID()+":parameter/p/other because no identity-based policy allows the ssm:GetParameters action")
			h.fails("an explicit deny", get("/p/denied"), "AccessDeniedException", "with an explicit deny in an identity-based policy")
			_, err = asInstance.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String("/p/mine"), Value: aws.String("w"), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
			h.fails("an action no statement allows", err, "AccessDeniedException", "no identity-based policy allows the ssm:PutParameter action")
		}},
		"R44 a SecureString's KMS key": {run: func(h *harness) {
			put := func(name, typ, key string) error {
				in := &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String("v"), Type: ssmtypes.ParameterType(typ)}
				if key != "" {
					in.KeyId = aws.String(key)
				}
				_, err := h.ssm.PutParameter(h.ctx, in)
				return err
			}
			for key, want := range map[string]string{
				"":                                     DefaultParameterKey,
				"1234abcd-12ab-34cd-56ef-1234567890ab": "1234abcd-12ab-34cd-56ef-1234567890ab",
				"alias/egress-proxy":                   "alias/egress-proxy",
				"arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab": "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
			} {
				name := "/k/key" + strings.NewReplacer(":", "-", "/", "-").Replace(key)
				h.ok("a SecureString with KeyId "+key, put(name, "SecureString", key))
				if p, _ := h.s.Parameter(h.region, name); p.KeyID != want {
					h.t.Errorf("KeyId %q: the parameter's key is %q, want %q", key, p.KeyID, want)
				}
			}
			h.failsWith("a KeyId that names no key", put("/k/bad", "SecureString", "not a key"), http.StatusBadRequest, "InvalidKeyId")
			h.fails("a KeyId that names no key", put("/k/bad", "SecureString", "not a key"), "InvalidKeyId", "The query key ID isn't valid.")
			h.ok("a String with a KeyId: no key", put("/k/plain", "String", "alias/egress-proxy"))
			if p, _ := h.s.Parameter(h.region, "/k/plain"); p.KeyID != "" {
				h.t.Errorf("a String has key %q, want none", p.KeyID)
			}
		}},
		"R18 egress rules": {opts: Options{MaxRulesPerGroup: 3}, run: func(h *harness) {
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d")})
			h.ok("create", err)
			gid := aws.ToString(g.GroupId)
			perm := func(proto string, port int32, cidrs ...string) []ec2types.IpPermission {
				p := ec2types.IpPermission{IpProtocol: aws.String(proto)}
				if port > 0 {
					p.FromPort, p.ToPort = aws.Int32(port), aws.Int32(port)
				}
				for _, c := range cidrs {
					p.IpRanges = append(p.IpRanges, ec2types.IpRange{CidrIp: aws.String(c)})
				}
				return []ec2types.IpPermission{p}
			}
			out, err := h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("tcp", 443, "10.0.0.0/8", "192.168.1.0/24")})
			h.ok("authorize", err)
			if len(out.SecurityGroupRules) != 2 || !aws.ToBool(out.SecurityGroupRules[0].IsEgress) || aws.ToString(out.SecurityGroupRules[0].CidrIpv4) != "10.0.0.0/8" {
				h.t.Errorf("authorize answered %+v, want two outbound rules", out.SecurityGroupRules)
			}
			if got := h.egress(gid); fmt.Sprint(got) != "[-1 0-0 0.0.0.0/0 tcp 443-443 10.0.0.0/8 tcp 443-443 192.168.1.0/24]" || len(h.ingress(gid)) != 0 {
				h.t.Errorf("the group describes egress %v, ingress %v; want the default rule and the two, no ingress", got, h.ingress(gid))
			}
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("tcp", 443, "10.0.0.0/8")})
			h.fails("an outbound rule the group has", err, "InvalidPermission.Duplicate", `peer: 10.0.0.0/8, TCP, from port: 443, to port: 443, ALLOW`)
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("-1", 0, "0.0.0.0/0")})
			h.fails("the default rule again", err, "InvalidPermission.Duplicate", "peer: 0.0.0.0/0, ALL, ALLOW")
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: perm("tcp", 443, "10.0.0.0/8")})
			h.ok("the same rule inbound: the directions are apart", err)
			// The quota counts each direction apart: three outbound rules fill it, inbound has room.
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("udp", 53, "10.0.0.0/8")})
			h.fails("a fourth outbound rule", err, "RulesPerSecurityGroupLimitExceeded", "")
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: perm("tcp", 443, "172.16.0.0/12", "192.168.0.0/16")})
			h.ok("the second and third inbound rules", err)
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, CidrIp: aws.String("10.0.0.0/8"), IpPermissions: perm("udp", 53, "10.0.0.0/8")})
			h.failsWith("the top-level CidrIp", err, http.StatusBadRequest, "UnknownParameter")
			h.fails("the top-level CidrIp", err, "UnknownParameter", "The parameter CidrIp is not recognized")
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpProtocol: aws.String("tcp")})
			h.failsWith("the top-level IpProtocol", err, http.StatusNotImplemented, "NotImplemented")
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("tcp", 443, "10.0.0.1/8")})
			h.fails("a malformed CIDR", err, "InvalidParameterValue", "CIDR block 10.0.0.1/8 is malformed")

			// Revoking: the default rule by its properties, one rule by the id authorize answered, an inbound
			// rule's id not among the outbound ones.
			rev, err := h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("-1", 0, "0.0.0.0/0")})
			h.ok("revoke the default rule", err)
			if len(rev.RevokedSecurityGroupRules) != 1 || len(rev.UnknownIpPermissions) != 0 {
				h.t.Errorf("revoke answered %d revoked, %d unknown; want 1, 0", len(rev.RevokedSecurityGroupRules), len(rev.UnknownIpPermissions))
			}
			byID := aws.ToString(out.SecurityGroupRules[1].SecurityGroupRuleId)
			_, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: g.GroupId, SecurityGroupRuleIds: []string{byID}})
			h.ok("revoke by rule id", err)
			if got := h.egress(gid); fmt.Sprint(got) != "[tcp 443-443 10.0.0.0/8]" || len(h.ingress(gid)) != 3 {
				h.t.Errorf("after the revokes the group describes egress %v, ingress %v; want one outbound rule, the three inbound", got, h.ingress(gid))
			}
			_, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: g.GroupId, SecurityGroupRuleIds: []string{byID}})
			h.fails("a rule id revoked already", err, "InvalidSecurityGroupRuleId.NotFound", byID)
			rev, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: g.GroupId, IpPermissions: perm("udp", 53, "10.0.0.0/8")})
			h.ok("revoke an unknown outbound rule in the default VPC", err)
			if len(rev.UnknownIpPermissions) != 1 || len(rev.RevokedSecurityGroupRules) != 0 {
				h.t.Errorf("revoke answered %d unknown, %d revoked; want 1, 0", len(rev.UnknownIpPermissions), len(rev.RevokedSecurityGroupRules))
			}
			sn := h.s.SetSubnets(h.region, []Subnet{{VPCID: "vpc-0aaaaaaaaaaaaaaa1", CIDR: "10.1.0.0/24"}})
			o, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g"), Description: aws.String("d"), VpcId: aws.String(sn[0].VPCID)})
			h.ok("create in another VPC", err)
			_, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: o.GroupId, IpPermissions: perm("udp", 53, "10.0.0.0/8")})
			h.fails("revoke an unknown outbound rule elsewhere", err, "InvalidPermission.NotFound", "")
		}},
		"R46 a new security group is unseen for a while": {opts: Options{Timing: &Timing{UnseenGroupCalls: 2}}, run: func(h *harness) {
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d")})
			h.ok("create", err)
			gid := aws.ToString(g.GroupId)
			rule := []ec2types.IpPermission{{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(3128), ToPort: aws.Int32(3128), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("10.0.0.0/8")}}}}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(gid), IpPermissions: rule})
			h.failsWith("authorize at once", err, http.StatusBadRequest, "InvalidGroup.NotFound")
			_, err = h.launch(func(in *ec2.RunInstancesInput) { in.SecurityGroupIds = []string{gid} })
			h.fails("a launch in it next", err, "InvalidGroup.NotFound", gid)
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(gid), IpPermissions: rule})
			h.ok("the third call sees it", err)
			out, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{gid}})
			h.ok("describe", err)
			if len(out.SecurityGroups) != 1 || len(out.SecurityGroups[0].IpPermissions) != 1 {
				h.t.Errorf("the group as described: %+v", out.SecurityGroups)
			}
		}},
		"R47 a new Elastic IP is unseen for a while": {opts: Options{Timing: &Timing{UnseenAddressCalls: 1}}, run: func(h *harness) {
			id := h.running(nil)
			a, err := h.ec2.AllocateAddress(h.ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
			h.ok("allocate", err)
			assoc := &ec2.AssociateAddressInput{AllocationId: a.AllocationId, InstanceId: aws.String(id)}
			_, err = h.ec2.AssociateAddress(h.ctx, assoc)
			h.failsWith("associate at once", err, http.StatusBadRequest, "InvalidAllocationID.NotFound")
			_, err = h.ec2.AssociateAddress(h.ctx, assoc)
			h.ok("the second call sees it", err)
			out, err := h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{aws.ToString(a.AllocationId)}})
			h.ok("describe", err)
			if len(out.Addresses) != 1 || aws.ToString(out.Addresses[0].InstanceId) != id {
				h.t.Errorf("the address as described: %+v", out.Addresses)
			}
		}},
		"R48 an instance profile IAM made moments ago": {run: func(h *harness) {
			arn := "arn:aws:iam::" + h.s.AccountID() + ":instance-profile/by-arn"
			h.s.NewInstanceProfile("fresh", 2)
			h.s.NewInstanceProfile(arn, 1)
			byName := func(in *ec2.RunInstancesInput) {
				in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String("fresh")}
			}
			for i := range 2 {
				_, err := h.launch(byName)
				h.failsWith(fmt.Sprint("by name, launch ", i), err, http.StatusBadRequest, "InvalidParameterValue")
				h.fails(fmt.Sprint("by name, launch ", i), err, "InvalidParameterValue", "Value (fresh) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name")
			}
			h.ok("by name, once IAM's change reached EC2", h.launchErr(byName))
			byARN := func(in *ec2.RunInstancesInput) {
				in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Arn: aws.String(arn)}
			}
			_, err := h.launch(byARN)
			h.fails("by ARN", err, "InvalidParameterValue", "parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN")
			h.ok("by ARN, then", h.launchErr(byARN))
			h.ok("another profile was never hidden", h.launchErr(func(in *ec2.RunInstancesInput) {
				in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String("old")}
			}))
		}},
		"R49 rules per security group": {opts: Options{MaxRulesPerGroup: 2}, run: func(h *harness) {
			q, err := h.sq().GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("vpc"), QuotaCode: aws.String(QuotaRulesPerSecurityGroup)})
			h.ok("GetServiceQuota vpc "+QuotaRulesPerSecurityGroup, err)
			if aws.ToFloat64(q.Quota.Value) != 2 || aws.ToString(q.Quota.QuotaName) != "Inbound or outbound rules per security group" ||
				aws.ToString(q.Quota.QuotaArn) != "arn:aws:servicequotas:"+h.region+":"+h.s.AccountID()+":vpc/"+QuotaRulesPerSecurityGroup {
				h.t.Errorf("the quota as answered: %+v", q.Quota)
			}
			_, err = h.sq().GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("vpc"), QuotaCode: aws.String(QuotaElasticIPs)})
			h.fails("an ec2 quota code under vpc", err, "NoSuchResourceException", "")
			g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("egress-proxy-p1"), Description: aws.String("d")})
			h.ok("create", err)
			rule := func(cidrs ...string) []ec2types.IpPermission {
				p := ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(3128), ToPort: aws.Int32(3128)}
				for _, c := range cidrs {
					p.IpRanges = append(p.IpRanges, ec2types.IpRange{CidrIp: aws.String(c)})
				}
				return []ec2types.IpPermission{p}
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: rule("10.0.0.0/8", "10.1.0.0/16", "10.2.0.0/16")})
			h.failsWith("three rules under a quota of two", err, http.StatusBadRequest, "RulesPerSecurityGroupLimitExceeded")
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: rule("10.0.0.0/8", "10.1.0.0/16")})
			h.ok("two", err)
		}},
		"R50 a rule naming another group holds it": {run: func(h *harness) {
			mk := func(name string) string {
				g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name), Description: aws.String("d")})
				h.ok("create "+name, err)
				return aws.ToString(g.GroupId)
			}
			proxy, app := mk("egress-proxy-p1"), mk("app")
			from := []ec2types.IpPermission{{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(5432), ToPort: aws.Int32(5432),
				UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String(proxy)}}}}
			out, err := h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(app), IpPermissions: from})
			h.ok("app admits the proxy's group", err)
			if len(out.SecurityGroupRules) != 1 || out.SecurityGroupRules[0].ReferencedGroupInfo == nil || aws.ToString(out.SecurityGroupRules[0].ReferencedGroupInfo.GroupId) != proxy {
				h.t.Errorf("the rule as answered: %+v", out.SecurityGroupRules)
			}
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(app), IpPermissions: from})
			h.fails("the same again", err, "InvalidPermission.Duplicate", "peer: "+proxy)
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(app), IpPermissions: []ec2types.IpPermission{{
				IpProtocol: aws.String("tcp"), FromPort: aws.Int32(1), ToPort: aws.Int32(1), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String("sg-0123456789abcdef0")}}}}})
			h.fails("an unknown source group", err, "InvalidGroup.NotFound", "")
			_, err = h.ec2.AuthorizeSecurityGroupIngress(h.ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(app), IpPermissions: []ec2types.IpPermission{{
				IpProtocol: aws.String("tcp"), FromPort: aws.Int32(1), ToPort: aws.Int32(1), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupName: aws.String("app")}}}}})
			h.failsWith("a source group by name", err, http.StatusNotImplemented, "NotImplemented")
			refs, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{flt("ip-permission.group-id", proxy)}})
			h.ok("who names the proxy's group", err)
			if len(refs.SecurityGroups) != 1 || aws.ToString(refs.SecurityGroups[0].GroupId) != app ||
				len(refs.SecurityGroups[0].IpPermissions) != 1 || len(refs.SecurityGroups[0].IpPermissions[0].UserIdGroupPairs) != 1 ||
				aws.ToString(refs.SecurityGroups[0].IpPermissions[0].UserIdGroupPairs[0].GroupId) != proxy {
				h.t.Errorf("groups naming %s: %+v", proxy, refs.SecurityGroups)
			}
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(proxy)})
			h.fails("delete while app names it", err, "DependencyViolation", "resource "+proxy+" has a dependent object")
			_, err = h.ec2.RevokeSecurityGroupIngress(h.ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(app), IpPermissions: from})
			h.ok("revoke app's rule", err)
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(proxy)})
			h.ok("delete once nothing names it", err)
		}},
		"R50 an outbound rule naming another group holds it": {run: func(h *harness) {
			mk := func(name string) string {
				g, err := h.ec2.CreateSecurityGroup(h.ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name), Description: aws.String("d")})
				h.ok("create "+name, err)
				return aws.ToString(g.GroupId)
			}
			proxy, app := mk("egress-proxy-p1"), mk("app")
			to := []ec2types.IpPermission{{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(3128), ToPort: aws.Int32(3128),
				UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String(proxy)}}}}
			out, err := h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: aws.String(app), IpPermissions: to})
			h.ok("app may send to the proxy's group", err)
			if len(out.SecurityGroupRules) != 1 || !aws.ToBool(out.SecurityGroupRules[0].IsEgress) || out.SecurityGroupRules[0].ReferencedGroupInfo == nil ||
				aws.ToString(out.SecurityGroupRules[0].ReferencedGroupInfo.GroupId) != proxy {
				h.t.Errorf("the rule as answered: %+v", out.SecurityGroupRules)
			}
			if got := h.egress(app); fmt.Sprint(got) != "[-1 0-0 0.0.0.0/0 tcp 3128-3128 "+proxy+"]" {
				h.t.Errorf("app describes egress %v", got)
			}
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: aws.String(app), IpPermissions: to})
			h.fails("the same again", err, "InvalidPermission.Duplicate", "peer: "+proxy)
			_, err = h.ec2.AuthorizeSecurityGroupEgress(h.ctx, &ec2.AuthorizeSecurityGroupEgressInput{GroupId: aws.String(app), IpPermissions: []ec2types.IpPermission{{
				IpProtocol: aws.String("tcp"), FromPort: aws.Int32(1), ToPort: aws.Int32(1), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String("sg-0123456789abcdef0")}}}}})
			h.fails("an unknown destination group", err, "InvalidGroup.NotFound", "")
			refs, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{flt("egress.ip-permission.group-id", proxy)}})
			h.ok("who sends to the proxy's group", err)
			if len(refs.SecurityGroups) != 1 || aws.ToString(refs.SecurityGroups[0].GroupId) != app {
				h.t.Errorf("groups whose outbound rules name %s: %+v", proxy, refs.SecurityGroups)
			}
			refs, err = h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{flt("ip-permission.group-id", proxy)}})
			h.ok("who admits the proxy's group", err)
			if len(refs.SecurityGroups) != 0 {
				h.t.Errorf("groups whose inbound rules name %s: %+v, want none (the reference is outbound)", proxy, refs.SecurityGroups)
			}
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(proxy)})
			h.fails("delete while app's outbound rule names it", err, "DependencyViolation", "resource "+proxy+" has a dependent object")
			_, err = h.ec2.RevokeSecurityGroupEgress(h.ctx, &ec2.RevokeSecurityGroupEgressInput{GroupId: aws.String(app), IpPermissions: to})
			h.ok("revoke app's rule", err)
			_, err = h.ec2.DeleteSecurityGroup(h.ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(proxy)})
			h.ok("delete once nothing names it", err)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}

func manyTags(n int) []ec2types.Tag {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("k%d", i), "v")
	}
	return tags(kv...)
}
