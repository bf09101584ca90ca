package provider

import (
	"context"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// kubernetesFactory builds the kubernetes backend from the provider block. An empty cluster map means one
// cluster named "default" from the kubeconfig the environment names, which the backend resolves.
func kubernetesFactory(m *kubernetesProviderModel) backend.Factory {
	cfg := kubernetes.Config{Clusters: map[string]kubernetes.ClusterConfig{}}
	for name, c := range m.Clusters {
		cfg.Clusters[name] = kubernetes.ClusterConfig{
			ConfigPath:    c.ConfigPath.ValueString(),
			ConfigContext: c.ConfigContext.ValueString(),
		}
	}
	return func(context.Context) (backend.Backend, error) { return kubernetes.New(cfg) }
}
