package kubernetes

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// The raw REST baseline of scripts/bench-k8s.sh (internal/cmd/bench) makes a proxy's objects with plain REST
// calls and waits for what Create waits for. These two give it Create's rendering and Create's rule instead of
// copies that could drift; nothing of the provider calls them.

// BenchObjects renders, as Create does, the proxy the benchmark's configurations describe (port 3128, clients
// from the pod range, one destination, no NetworkPolicy) as name in namespace: its ConfigMap, Deployment and
// Service.
func BenchObjects(name, namespace, image string) (*corev1.ConfigMap, *appsv1.Deployment, *corev1.Service, error) {
	b := &Backend{cfg: Config{Image: image}}
	id := backend.ProviderID{Backend: Kind, Target: "bench", Scope: namespace, Name: name}
	spec := backend.Spec{
		Name: name, UID: "bench-" + name, Owner: "bench",
		Placement: backend.Placement{Backend: Kind, Target: id.Target, Scope: namespace, Options: &Options{NetworkPolicy: false}},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedDestinations: []string{"example.com"}},
	}
	o, err := b.render(spec, id)
	if err != nil {
		return nil, nil, nil, err
	}
	return o.configMap, o.deployment, o.service, nil
}

// DeploymentReady says whether d runs its current template on every replica and is Available: where Create's
// wait for the rollout ends.
func DeploymentReady(d *appsv1.Deployment) bool {
	ready, _ := deploymentReady(d.Name, d)
	return ready
}
