package kubernetes

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Backend is the kubernetes implementation of backend.Backend, backend.Reconfigurer and backend.Checker.
type Backend struct {
	cfg       Config
	clusters  map[string]ClusterConfig
	newClient clientFactory

	mu      sync.Mutex
	clients map[string]*client
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Reconfigurer = (*Backend)(nil)
	_ backend.Checker      = (*Backend)(nil)
)

// client is one cluster's connection: the typed clientset the backend's calls go through, the raw /readyz
// probe the clientset has no method for, and what it learnt of the cluster's nodes.
type client struct {
	cs     kubernetes.Interface
	readyz func(ctx context.Context) error
	// nodes caches the nodes' addresses egress addresses are read from (egress.go).
	nodes nodeCache
}

// clientFactory builds a cluster's client. Tests hand in the fake clientset.
type clientFactory func(name string, cc ClusterConfig) (*client, error)

// New validates cfg and returns a backend. It connects to nothing: each cluster's client is built on its
// first use, from files read then.
func New(cfg Config) (*Backend, error) {
	return newBackend(cfg, newRealClient)
}

func newBackend(cfg Config, f clientFactory) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, backend.NewError(backend.ClassPermanent, "kubernetes backend configuration", err)
	}
	return &Backend{cfg: cfg, clusters: cfg.clusters(), newClient: f, clients: map[string]*client{}}, nil
}

func newRealClient(name string, cc ClusterConfig) (*client, error) {
	rc, err := cc.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &client{cs: cs, readyz: func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}}, nil
}

// client returns the cluster's client, building it on first use. A failed build is not remembered.
func (b *Backend) client(cluster string) (*client, error) {
	object := clusterObject(cluster)
	cc, ok := b.clusters[cluster]
	if !ok {
		return nil, backend.Permanent(object, "no cluster %q is configured on the provider (configured: %v)", cluster, b.clusterNames())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.clients[cluster]; ok {
		return c, nil
	}
	c, err := b.newClient(cluster, cc)
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, object, err)
	}
	b.clients[cluster] = c
	return c, nil
}

func (b *Backend) clusterNames() []string { return b.cfg.ClusterNames() }

func clusterObject(cluster string) string { return fmt.Sprintf("kubernetes cluster %s", cluster) }

// objectName names one API object the way a user finds it with kubectl.
func objectName(kind string, id backend.ProviderID) string {
	return fmt.Sprintf("%s %s/%s on cluster %s", kind, id.Scope, id.Name, id.Target)
}

// checkID refuses ids of other backends or unknown clusters before any call, and a context that has ended
// already (client-go would refuse each request for it, but its fake clientset would not).
func (b *Backend) checkID(ctx context.Context, id backend.ProviderID) (*client, error) {
	if err := ctx.Err(); err != nil {
		return nil, classify(id.String(), err)
	}
	if id.Backend != Kind || id.Scope == "" || id.Name == "" {
		return nil, backend.Permanent(id.String(), "not a kubernetes proxy id (%s)", IDForm)
	}
	return b.client(id.Target)
}
