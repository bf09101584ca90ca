package kubernetes

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Node shapes as clusters report them. Addresses are from the documentation ranges (RFC 5737, RFC 3849),
// which are public for the rule, and the private ranges.
var (
	// A cloud node with a public address: GKE, EKS, AKS nodes outside private clusters.
	cloudPublic = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.128.0.5"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: corev1.NodeHostName, Address: "n1"},
	}
	// The same cloud, another node.
	cloudPublic2 = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.128.0.6"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.6"},
	}
	// A private cloud node (or the test cluster's): the internet sees a NAT the node does not name.
	private = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.31.255.1"}, {Type: corev1.NodeHostName, Address: "egress-node"}}
	// A bare-metal node without a cloud provider: its public address is reported as InternalIP.
	bareMetal = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.9"}, {Type: corev1.NodeHostName, Address: "metal"}}
	// Carrier-grade NAT space is not public, though netip does not call it private.
	sharedSpace = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "100.64.3.4"}}
	ipv6Global  = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "2001:db8::9"}}
	ipv6ULA     = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "fd00::9"}}
	// Only a DNS name: not an address the rule can give.
	dnsOnly = []corev1.NodeAddress{{Type: corev1.NodeExternalDNS, Address: "n1.example.com"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
)

func proxyPod(name, node string, mutate ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{backend.LabelName: "p1"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.9.9.9"},
	}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func TestEgressAddressOf(t *testing.T) {
	t.Parallel()
	nodes := map[string][]corev1.NodeAddress{
		"cloud": cloudPublic, "cloud2": cloudPublic2, "private": private, "metal": bareMetal,
		"shared": sharedSpace, "v6": ipv6Global, "ula": ipv6ULA, "dns": dnsOnly,
	}
	tests := map[string]struct {
		pods []corev1.Pod
		want string
	}{
		"no pod":                          {nil, ""},
		"node with an ExternalIP":         {[]corev1.Pod{proxyPod("a", "cloud")}, "203.0.113.5"},
		"private node: unknown, null":     {[]corev1.Pod{proxyPod("a", "private")}, ""},
		"bare metal: public InternalIP":   {[]corev1.Pod{proxyPod("a", "metal")}, "198.51.100.9"},
		"shared address space is private": {[]corev1.Pod{proxyPod("a", "shared")}, ""},
		"global IPv6":                     {[]corev1.Pod{proxyPod("a", "v6")}, "2001:db8::9"},
		"unique local IPv6":               {[]corev1.Pod{proxyPod("a", "ula")}, ""},
		"a DNS name is no address":        {[]corev1.Pod{proxyPod("a", "dns")}, ""},
		"two pods, one node":              {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("b", "cloud")}, "203.0.113.5"},
		"two nodes, two addresses":        {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("b", "cloud2")}, ""},
		"a public node and a private one": {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("b", "private")}, ""},
		"a node that could not be read":   {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("b", "unread")}, ""},
		"a terminating pod elsewhere": {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("old", "private", terminating)},
			"203.0.113.5"},
		"a pod not yet scheduled": {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("new", "")}, "203.0.113.5"},
		"a failed pod elsewhere": {[]corev1.Pod{proxyPod("a", "cloud"), proxyPod("evicted", "private", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
		})}, "203.0.113.5"},
		"only a terminating pod": {[]corev1.Pod{proxyPod("old", "cloud", terminating)}, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := egressAddressOf(tt.pods, nodes); got != tt.want {
				t.Errorf("egress address %q, want %q", got, tt.want)
			}
		})
	}
}

func node(name string, addrs []corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func service(mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: testNS},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.20", Ports: []corev1.ServicePort{{Port: 3128}}},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func loadBalancer(ingress ...corev1.LoadBalancerIngress) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = ingress
	}
}

// Get reports the two addresses from the objects of a proxy: the egress one from the pods' nodes, the ingress
// one from the Service. A load balancer's address is never the egress address, whatever the nodes have.
func TestGetAddresses(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		svc                  *corev1.Service
		nodeAddresses        []corev1.NodeAddress
		wantEgress, wantIngr string
	}{
		"ClusterIP on a public node":  {service(nil), cloudPublic, "203.0.113.5", ""},
		"ClusterIP on a private node": {service(nil), private, "", ""},
		"LoadBalancer on a private node": {service(loadBalancer(corev1.LoadBalancerIngress{IP: "192.0.2.80"})), private,
			"", "192.0.2.80"},
		"LoadBalancer on a public node": {service(loadBalancer(corev1.LoadBalancerIngress{IP: "192.0.2.80"})), cloudPublic,
			"203.0.113.5", "192.0.2.80"},
		"LoadBalancer with a host name": {service(loadBalancer(corev1.LoadBalancerIngress{Hostname: "lb.example.com"})), private,
			"", "lb.example.com"},
		"LoadBalancer without its address yet": {service(loadBalancer()), cloudPublic, "203.0.113.5", ""},
		"NodePort": {service(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), cloudPublic,
			"203.0.113.5", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pod := proxyPod("p1-abc", "n1")
			b, _ := newFake(t, readyDeployment("p1"), tt.svc, &pod, node("n1", tt.nodeAddresses))
			inst, err := b.Get(testCtx(t), testID())
			if err != nil {
				t.Fatal(err)
			}
			if inst.EgressAddress != tt.wantEgress || inst.IngressAddress != tt.wantIngr {
				t.Errorf("egress %q ingress %q, want egress %q ingress %q", inst.EgressAddress, inst.IngressAddress, tt.wantEgress, tt.wantIngr)
			}
		})
	}
}

// nodeGets counts the requests for Nodes the fake clientset saw.
func nodeGets(cs interface{ Actions() []k8stesting.Action }) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// A refresh reads each node once however many proxies run on it, and credentials bound by namespace Roles,
// which may not get Nodes, read proxies all the same: without an egress address, without an error, and asked
// once. Any other failure to read a node fails the Get, so a blip never turns a known address into none.
func TestGetReadsNodesOnce(t *testing.T) {
	t.Parallel()
	nodes := schema.GroupResource{Resource: "nodes"}
	tests := map[string]struct {
		nodeErr    error
		wantEgress string
		wantGets   int
		wantErr    error // the class sentinel of the Get's error; nil for none
	}{
		"readable": {nil, "203.0.113.5", 1, nil},
		"forbidden": {apierrors.NewForbidden(nodes, "n1", errors.New(`User "ns-user" cannot get resource "nodes"`)),
			"", 1, nil},
		"gone":                  {apierrors.NewNotFound(nodes, "n1"), "", 2, nil},
		"API server overloaded": {apierrors.NewTooManyRequests("slow down", 1), "", 1, backend.ErrTransient},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			p1, p2 := proxyPod("p1-abc", "n1"), proxyPod("p2-abc", "n1")
			p2.Labels[backend.LabelName] = "p2"
			b, cs := newFake(t, readyDeployment("p1"), readyDeployment("p2"), service(nil), &p1, &p2, node("n1", cloudPublic))
			if tt.nodeErr != nil {
				cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.nodeErr
				})
			}
			second := testID()
			second.Name = "p2"
			for _, id := range []backend.ProviderID{testID(), second} {
				inst, err := b.Get(ctx, id)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("Get %s: error %v, want %v", id, err, tt.wantErr)
					}
					break
				}
				if err != nil {
					t.Fatalf("Get %s: %v", id, err)
				}
				if inst.EgressAddress != tt.wantEgress {
					t.Errorf("Get %s: egress %q, want %q", id, inst.EgressAddress, tt.wantEgress)
				}
			}
			if got := nodeGets(cs); got != tt.wantGets {
				t.Errorf("%d requests for nodes, want %d", got, tt.wantGets)
			}
		})
	}
}

// Create of a LoadBalancer proxy returns once the balancer has its address, with that address as the ingress
// address and not as the egress one. A cloud's controller writes the address into the Service's status some
// time after the Service is made; here it is written once Create watches the Service, so the address arrives
// through the watch, after the Deployment's wait has ended.
func TestCreateWaitsForTheLoadBalancerAddress(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	cs.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		go func() { // after the reactor returns: the fake holds its lock until then
			s, err := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err == nil {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.80"}}
				_, err = cs.CoreV1().Services(testNS).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("load balancer stand-in: %v", err)
			}
		}()
		return true, w, nil
	})
	spec := testSpec("p1")
	spec.Placement.Options = &Options{ServiceType: string(corev1.ServiceTypeLoadBalancer)}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.IngressAddress != "192.0.2.80" || inst.EgressAddress != "" {
		t.Errorf("ingress %q egress %q, want ingress 192.0.2.80 and no egress address", inst.IngressAddress, inst.EgressAddress)
	}
}
