package kubernetes

import (
	"context"
	"net/netip"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's connections to the internet leave the cluster from its node: the network plugin masquerades them
// to the node's address, and a node with only private addresses then goes through a NAT the cluster does not
// describe (Cloud NAT, a NAT gateway, an egress gateway). So the backend reports an egress address only where
// the node itself names a public address; the Service's load balancer only receives connections and is the
// ingress address, never the egress one.

// sharedAddressSpace (RFC 6598) is carrier-grade NAT space: not private by netip's definition, yet never what
// a destination on the internet sees.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// egressAddressOf is the address destinations see the proxy's connections come from: the public address of
// the node its pods run on, when every pod that serves (or is starting to) runs on a node that has one and
// they all agree. It is "" when there is no such pod, when a node could not be read (absent from addresses),
// has no public address, or when the pods' nodes have different ones, which one attribute cannot hold.
func egressAddressOf(pods []corev1.Pod, addresses map[string][]corev1.NodeAddress) string {
	out := ""
	for _, node := range servingNodes(pods) {
		addrs, ok := addresses[node]
		if !ok {
			return ""
		}
		a := publicAddress(addrs)
		if a == "" || (out != "" && a != out) {
			return ""
		}
		out = a
	}
	return out
}

// serving says whether p serves or will: not being deleted (a finished rollout's old pods are), not ended.
func serving(p corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// servingNodes names, once each and sorted, the nodes of the pods that serve or will: scheduled, not being
// deleted (a finished rollout's old pods are), not ended.
func servingNodes(pods []corev1.Pod) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName == "" || !serving(p) {
			continue
		}
		if !seen[p.Spec.NodeName] {
			seen[p.Spec.NodeName] = true
			out = append(out, p.Spec.NodeName)
		}
	}
	sort.Strings(out)
	return out
}

// publicAddress is the node's address destinations on the internet see: its ExternalIP, which cloud providers
// set on nodes with a public address (and operators with --node-external-ip), else an InternalIP that is a
// public address itself (bare-metal nodes without a cloud provider report theirs that way). A node with only
// private InternalIPs gets "": its traffic is translated again on the way out, by something the node does
// not name.
func publicAddress(addrs []corev1.NodeAddress) string {
	for _, a := range addrs {
		if a.Type == corev1.NodeExternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return ip.String()
			}
		}
	}
	for _, a := range addrs {
		if a.Type == corev1.NodeInternalIP && isPublic(a.Address) {
			return a.Address
		}
	}
	return ""
}

func isPublic(s string) bool {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !sharedAddressSpace.Contains(ip)
}

// nodeCache keeps what each node reports as its addresses for the life of the cluster's client (one
// Terraform command): a refresh of many proxies on a few nodes reads each node once. Credentials that may not
// get Nodes are asked once.
type nodeCache struct {
	mu        sync.Mutex
	addresses map[string][]corev1.NodeAddress
	forbidden bool
}

// nodeAddresses returns the addresses of the nodes the pods serve from, by node name, reading the ones not
// yet known. A node that is gone is left out, and so is every node when the credentials may not get Nodes
// (namespace Roles grant none: Nodes are cluster-scoped): the proxy works all the same, only its egress
// address is unknown. Any other failure is an error, so a network blip does not turn a known address into
// none.
func (c *client) nodeAddresses(ctx context.Context, cluster string, pods []corev1.Pod) (map[string][]corev1.NodeAddress, error) {
	out := map[string][]corev1.NodeAddress{}
	for _, name := range servingNodes(pods) {
		c.nodes.mu.Lock()
		addrs, known := c.nodes.addresses[name]
		forbidden := c.nodes.forbidden
		c.nodes.mu.Unlock()
		if forbidden {
			return map[string][]corev1.NodeAddress{}, nil
		}
		if !known {
			n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsForbidden(err):
				c.nodes.mu.Lock()
				c.nodes.forbidden = true
				c.nodes.mu.Unlock()
				return map[string][]corev1.NodeAddress{}, nil
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return nil, classify(clusterObject(cluster)+" Node "+name, err)
			}
			addrs = n.Status.Addresses
			c.nodes.mu.Lock()
			if c.nodes.addresses == nil {
				c.nodes.addresses = map[string][]corev1.NodeAddress{}
			}
			c.nodes.addresses[name] = addrs
			c.nodes.mu.Unlock()
		}
		out[name] = addrs
	}
	return out, nil
}
