package kubernetes

import "github.com/egress-proxies/terraform-provider-egress/internal/backend"

// Kind is this backend's kind: the first part of its ids and the name of its provider and resource blocks.
const Kind backend.Kind = "kubernetes"

// IDForm is how this backend's ids look.
var IDForm = backend.IDForm{Kind: Kind, Parts: []string{"cluster", "namespace", "name"}}

// Options holds the settings of a proxy on a Kubernetes cluster. Zero values take the backend's
// defaults (see objects.go#withDefaults).
type Options struct {
	// Replicas is how many proxy pods run behind the Service.
	Replicas int
	// Image is the Squid image; empty means the cluster's or the provider's default.
	Image string
	// NodeSelector and Tolerations place the pods, for example on egress nodes with known addresses.
	NodeSelector map[string]string
	Tolerations  []Toleration
	// Requests and Limits are resource quantities by name ("cpu", "memory"), in Kubernetes notation.
	Requests map[string]string
	Limits   map[string]string
	// ServiceType is ClusterIP, NodePort or LoadBalancer.
	ServiceType string
	// NetworkPolicy, when true, admits only the allowed client ranges to the proxy port.
	NetworkPolicy bool
}

// Toleration lets proxy pods run on tainted nodes.
type Toleration struct {
	Key      string
	Operator string
	Value    string
	Effect   string
}
