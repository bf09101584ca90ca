package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The provider-level settings of each backend: where its targets are and how to reach them.

type kubernetesProviderModel struct {
	Clusters map[string]kubernetesClusterModel `tfsdk:"clusters"`
}

type kubernetesClusterModel struct {
	ConfigPath    types.String `tfsdk:"config_path"`
	ConfigContext types.String `tfsdk:"config_context"`
}

type gcpProviderModel struct {
	Project  types.String `tfsdk:"project"`
	Endpoint types.String `tfsdk:"endpoint"`
}

type kvmProviderModel struct {
	Hosts map[string]kvmHostModel `tfsdk:"hosts"`
}

type kvmHostModel struct {
	URI types.String `tfsdk:"uri"`
}

// Environment fallbacks, as the Kubernetes, Google and libvirt tools read them.
const (
	kubeconfigEnvVar = "KUBECONFIG"
	gcpProjectEnvVar = "GOOGLE_PROJECT"
	libvirtURIEnvVar = "LIBVIRT_DEFAULT_URI"
	defaultKVMHost   = "local"
)

func kubernetesProviderSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "Kubernetes backend: the clusters proxies may be placed on.",
		Attributes: map[string]schema.Attribute{
			"clusters": schema.MapNestedAttribute{
				Optional: true,
				MarkdownDescription: "Clusters by the name resources use in `kubernetes.cluster`. " +
					"When empty, one cluster named `default` is read from `" + kubeconfigEnvVar + "`.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"config_path":    schema.StringAttribute{Optional: true, MarkdownDescription: "Path of the kubeconfig file. Defaults to `" + kubeconfigEnvVar + "`."},
					"config_context": schema.StringAttribute{Optional: true, MarkdownDescription: "Context in the kubeconfig; its current context when unset."},
				}},
			},
		},
	}
}

func gcpProviderSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "GCP Compute Engine backend.",
		Attributes: map[string]schema.Attribute{
			"project":  schema.StringAttribute{Optional: true, MarkdownDescription: "Default project. Defaults to `" + gcpProjectEnvVar + "`."},
			"endpoint": schema.StringAttribute{Optional: true, MarkdownDescription: "Compute API endpoint, for private endpoints and tests."},
		},
	}
}

func kvmProviderSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "KVM/libvirt backend: the libvirt hosts proxies may be placed on.",
		Attributes: map[string]schema.Attribute{
			"hosts": schema.MapNestedAttribute{
				Optional: true,
				MarkdownDescription: "Hosts by the name resources use in `kvm.host`. When empty, one host named `" + defaultKVMHost +
					"` is reached at `" + libvirtURIEnvVar + "`, or `qemu:///system`.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"uri": schema.StringAttribute{Required: true, MarkdownDescription: "libvirt URI, such as `qemu:///system` or `qemu+ssh://user@host/system`."},
				}},
			},
		},
	}
}

// defaultFactories builds the real backends. A backend that has no implementation in this build yet is
// reported when a resource first uses it, with the class Permanent and what to do.
func defaultFactories(cfg providerModel) (map[backend.Kind]backend.Factory, error) {
	factories := map[backend.Kind]backend.Factory{}
	if cfg.Kubernetes != nil {
		factories[backend.KindKubernetes] = unavailable(backend.KindKubernetes)
	}
	if cfg.GCP != nil {
		factories[backend.KindGCP] = unavailable(backend.KindGCP)
	}
	if cfg.KVM != nil {
		factories[backend.KindKVM] = unavailable(backend.KindKVM)
	}
	return factories, nil
}

func unavailable(kind backend.Kind) backend.Factory {
	return func(context.Context) (backend.Backend, error) {
		return nil, backend.Permanent(string(kind)+" backend",
			"this version of the provider does not include the %s backend yet; use a provider version that lists it in its CHANGELOG", kind)
	}
}

// kvmHosts resolves the host map with its environment fallback.
func kvmHosts(m *kvmProviderModel) map[string]string {
	hosts := map[string]string{}
	for name, h := range m.Hosts {
		hosts[name] = h.URI.ValueString()
	}
	if len(hosts) == 0 {
		uri := os.Getenv(libvirtURIEnvVar)
		if uri == "" {
			uri = "qemu:///system"
		}
		hosts[defaultKVMHost] = uri
	}
	return hosts
}
