package kubernetes

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// egressAdmits reads np's egress rules as the NetworkPolicy API defines them: a packet leaves when one rule
// matches both its port (no ports: any) and its destination (no peers: any; an ipBlock: inside the range and
// outside every exception). Selector peers name pods, never addresses, and the proxy's policy has none.
func egressAdmits(np *networkingv1.NetworkPolicy, to netip.Addr, proto corev1.Protocol, port int32) bool {
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		return true
	}
	portMatches := func(ports []networkingv1.NetworkPolicyPort) bool {
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			if (p.Protocol == nil || *p.Protocol == proto) && (p.Port == nil || p.Port.IntVal == port) {
				return true
			}
		}
		return false
	}
	peerMatches := func(peers []networkingv1.NetworkPolicyPeer) bool {
		if len(peers) == 0 {
			return true
		}
		for _, p := range peers {
			if p.IPBlock == nil || !netip.MustParsePrefix(p.IPBlock.CIDR).Contains(to) {
				continue
			}
			excepted := false
			for _, e := range p.IPBlock.Except {
				excepted = excepted || netip.MustParsePrefix(e).Contains(to)
			}
			if !excepted {
				return true
			}
		}
		return false
	}
	for _, r := range np.Spec.Egress {
		if portMatches(r.Ports) && peerMatches(r.To) {
			return true
		}
	}
	return false
}

func TestNetworkPolicyEgressRefusesWhatSquidRefuses(t *testing.T) {
	t.Parallel()
	type probe struct {
		to    string
		proto corev1.Protocol
		port  int32
		want  bool
	}
	web := func(to string, want bool) probe { return probe{to, corev1.ProtocolTCP, 443, want} }
	tests := map[string]struct {
		allowedPrivate []string
		probes         []probe
	}{
		"no private range allowed": {
			probes: []probe{
				web("93.184.216.34", true),
				web("2606:4700::1", true),
				// The project's test networks stand in for the internet: Squid does not refuse them either.
				web("198.18.0.7", true),
				{"169.254.169.254", corev1.ProtocolTCP, 80, false},
				web("127.0.0.1", false),
				web("0.0.0.0", false),
				web("10.1.2.3", false),
				web("100.64.0.1", false),
				web("172.31.255.1", false),
				web("192.168.1.1", false),
				web("224.0.0.1", false),
				web("fd12::1", false),
				web("fe80::1", false),
				web("::1", false),
				web("64:ff9b::7f00:1", false),
				web("2002:7f00:1::1", false),
			},
		},
		"one private range allowed": {
			allowedPrivate: []string{"172.31.255.0/24"},
			probes: []probe{
				{"172.31.255.1", corev1.ProtocolTCP, 80, true},
				web("172.31.255.254", true),
				web("172.31.254.1", false),
				web("172.16.0.1", false),
				web("10.1.2.3", false),
				{"169.254.169.254", corev1.ProtocolTCP, 80, false},
				web("93.184.216.34", true),
			},
		},
		"a whole private range allowed": {
			allowedPrivate: []string{"10.0.0.0/8", "fc00::/7"},
			probes: []probe{
				web("10.1.2.3", true),
				web("fd12::1", true),
				// The AWS and GCE metadata servers' IPv6 addresses lie inside fc00::/7 and stay refused.
				{"fd00:ec2::254", corev1.ProtocolTCP, 80, false},
				{"fd20:ce::254", corev1.ProtocolTCP, 80, false},
				web("192.168.1.1", false),
				web("169.254.169.254", false),
			},
		},
		"DNS reaches a resolver wherever it is": {
			probes: []probe{
				// kube-dns pods, a node-local cache, the test cluster's node.
				{"10.244.0.10", corev1.ProtocolUDP, 53, true},
				{"169.254.20.10", corev1.ProtocolUDP, 53, true},
				{"172.31.255.1", corev1.ProtocolTCP, 53, true},
				// Port 53 only: no other UDP or TCP port of a refused address.
				{"169.254.169.254", corev1.ProtocolUDP, 123, false},
				{"172.31.255.1", corev1.ProtocolTCP, 54, false},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec("p1")
			spec.Proxy.AllowedPrivateCIDRs = tc.allowedPrivate
			np := networkPolicy(metav1.ObjectMeta{Name: "p1", Namespace: testNS}, spec)
			for _, p := range tc.probes {
				if got := egressAdmits(np, netip.MustParseAddr(p.to), p.proto, p.port); got != p.want {
					t.Errorf("egress to %s %s/%d: admitted %v, want %v", p.to, p.proto, p.port, got, p.want)
				}
			}
		})
	}
}

// TestNetworkPolicyIsValid holds the policy to the API server's rules for ipBlocks (each exception strictly
// inside its range, of its family, in canonical form) and to the shape the proxy needs: both directions
// policed, only the proxy's pods selected, the client ranges admitted to the proxy port alone.
func TestNetworkPolicyIsValid(t *testing.T) {
	t.Parallel()
	tests := map[string][]string{
		"no private range allowed": nil,
		"private ranges allowed":   {"172.31.255.0/24", "10.0.0.0/8", "fc00::/7"},
		"a single address allowed": {"192.168.7.7/32"},
	}
	for name, allowedPrivate := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec("p1")
			spec.Proxy.AllowedPrivateCIDRs = allowedPrivate
			np := networkPolicy(metav1.ObjectMeta{Name: "p1", Namespace: testNS}, spec)
			if want := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}; !slices.Equal(np.Spec.PolicyTypes, want) {
				t.Errorf("policy types %v, want %v", np.Spec.PolicyTypes, want)
			}
			if got := np.Spec.PodSelector.MatchLabels; len(got) != len(selectorLabels(spec)) || got["egress-uid"] != spec.UID {
				t.Errorf("pod selector %v, want the proxy's %v", got, selectorLabels(spec))
			}
			if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.StrVal != proxyPortName {
				t.Fatalf("ingress %+v, want one rule for the proxy port", np.Spec.Ingress)
			}
			var from []string
			for _, p := range np.Spec.Ingress[0].From {
				from = append(from, p.IPBlock.CIDR)
			}
			if !slices.Equal(from, spec.Proxy.AllowedClientCIDRs) {
				t.Errorf("ingress from %v, want the allowed client ranges %v", from, spec.Proxy.AllowedClientCIDRs)
			}
			blocks := 0
			for _, r := range np.Spec.Egress {
				for _, p := range r.To {
					if p.IPBlock == nil {
						t.Errorf("egress peer %+v: want only ipBlocks", p)
						continue
					}
					blocks++
					cidr := netip.MustParsePrefix(p.IPBlock.CIDR)
					if len(p.IPBlock.Except) == 0 {
						t.Errorf("block %s refuses nothing", cidr)
					}
					for _, e := range p.IPBlock.Except {
						ep, err := netip.ParsePrefix(e)
						if err != nil || ep.Masked() != ep || ep.String() != e {
							t.Errorf("exception %q of %s is not a canonical CIDR", e, cidr)
							continue
						}
						if ep.Addr().Is4() != cidr.Addr().Is4() || ep.Bits() <= cidr.Bits() || !cidr.Contains(ep.Addr()) {
							t.Errorf("exception %s is not strictly inside %s", e, cidr)
						}
					}
				}
			}
			if blocks != 2 {
				t.Errorf("%d egress ipBlocks, want one per address family", blocks)
			}
		})
	}
}
