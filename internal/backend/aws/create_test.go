package aws

import (
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

func TestArchitectureOf(t *testing.T) {
	t.Parallel()
	for instanceType, want := range map[string]string{
		"t3.micro": "amd64", "t4g.small": "arm64", "m7g.large": "arm64", "c7gn.xlarge": "arm64", "m6i.large": "amd64",
		"g5.xlarge": "amd64", "m5a.large": "amd64", "x2gd.medium": "arm64", "a1.large": "arm64", "a1.metal": "arm64",
	} {
		if got := architectureOf(instanceType); got != want {
			t.Errorf("architectureOf(%q) = %q, want %q", instanceType, got, want)
		}
	}
}

func TestClientTokenIsStableAndShort(t *testing.T) {
	t.Parallel()
	a, b := clientToken("6f1c2b1e-0000-4000-8000-000000000001"), clientToken("6f1c2b1e-0000-4000-8000-000000000002")
	if a != clientToken("6f1c2b1e-0000-4000-8000-000000000001") || a == b {
		t.Fatalf("tokens %q and %q: want the same UID to give the same token and another UID another", a, b)
	}
	if len(a) > 64 || strings.ContainsFunc(a, func(r rune) bool { return r > 127 }) {
		t.Fatalf("token %q: EC2 takes at most 64 ASCII characters", a)
	}
}

func TestTierFor(t *testing.T) {
	t.Parallel()
	if tierFor(strings.Repeat("x", 4096)) != "Standard" || tierFor(strings.Repeat("x", 4097)) != "Advanced" {
		t.Fatal("values up to 4096 bytes fit the Standard tier, larger ones need Advanced")
	}
}

func TestIngressDiff(t *testing.T) {
	t.Parallel()
	s := proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8", "2001:db8::/32"}}
	rules := ingressRules(s, nil)
	if len(rules) != 1 {
		t.Fatalf("rules %+v: want the proxy port's alone without metrics", rules)
	}
	want := rules[0]
	if len(want.IpRanges) != 1 || len(want.Ipv6Ranges) != 1 || awssdk.ToInt32(want.FromPort) != 3128 {
		t.Fatalf("rule %+v: want one IPv4 and one IPv6 range on port 3128", want)
	}
	have := []ec2types.IpPermission{{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(3128), ToPort: awssdk.Int32(3128),
		IpRanges: []ec2types.IpRange{{CidrIp: awssdk.String("10.0.0.0/8")}, {CidrIp: awssdk.String("192.168.0.0/16")}}}}
	add, remove := diffPermissions(have, []ec2types.IpPermission{want})
	if len(add) != 1 || awssdk.ToString(add[0].Ipv6Ranges[0].CidrIpv6) != "2001:db8::/32" {
		t.Errorf("add = %+v, want the IPv6 range only", add)
	}
	if len(remove) != 1 || awssdk.ToString(remove[0].IpRanges[0].CidrIp) != "192.168.0.0/16" {
		t.Errorf("remove = %+v, want 192.168.0.0/16 only", remove)
	}
	if add, remove := diffPermissions(rules, rules); len(add)+len(remove) != 0 {
		t.Errorf("the same rule again: add %v, remove %v, want nothing", add, remove)
	}
}
