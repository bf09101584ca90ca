package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// The provider-level settings of each backend: where its targets are and how to reach them.

type kubernetesProviderModel struct {
	Clusters map[string]kubernetesClusterModel `tfsdk:"clusters"`
}

type kubernetesClusterModel struct {
	ConfigPath    types.String `tfsdk:"config_path"`
	ConfigContext types.String `tfsdk:"config_context"`
	// The rest is in provider_kubernetes.go.
	kubernetesClusterExtra
}

type gcpProviderModel struct {
	Project  types.String `tfsdk:"project"`
	Endpoint types.String `tfsdk:"endpoint"`
}

type kvmProviderModel struct {
	Hosts      map[string]kvmHostModel `tfsdk:"hosts"`
	Pool       types.String            `tfsdk:"pool"`
	BaseVolume types.String            `tfsdk:"base_volume"`
	Network    types.String            `tfsdk:"network"`
	DomainType types.String            `tfsdk:"domain_type"`
}

type kvmHostModel struct {
	URI                   types.String `tfsdk:"uri"`
	SSHKeyFile            types.String `tfsdk:"ssh_key_file"`
	KnownHostsFile        types.String `tfsdk:"known_hosts_file"`
	InsecureIgnoreHostKey types.Bool   `tfsdk:"insecure_ignore_host_key"`
}

// Environment fallbacks, as the Kubernetes, Google and libvirt tools read them.
const (
	kubeconfigEnvVar = "KUBECONFIG"
	gcpProjectEnvVar = "GOOGLE_PROJECT"
	libvirtURIEnvVar = "LIBVIRT_DEFAULT_URI"
	defaultKVMHost   = kvm.DefaultHostName
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
				NestedObject: schema.NestedAttributeObject{Attributes: withAttributes(map[string]schema.Attribute{
					"config_path":    schema.StringAttribute{Optional: true, MarkdownDescription: "Path of the kubeconfig file. Defaults to `" + kubeconfigEnvVar + "`."},
					"config_context": schema.StringAttribute{Optional: true, MarkdownDescription: "Context in the kubeconfig; its current context when unset."},
				}, kubernetesClusterAttributes())},
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
					"uri":          schema.StringAttribute{Required: true, MarkdownDescription: "libvirt URI: `qemu:///system`, `qemu+ssh://user@host/system`, `qemu+tcp://host/system`, `qemu+tls://host/system` or `test:///default`."},
					"ssh_key_file": schema.StringAttribute{Optional: true, MarkdownDescription: "Private key for `qemu+ssh://` URIs."},
					"known_hosts_file": schema.StringAttribute{Optional: true,
						MarkdownDescription: "known_hosts file that verifies the SSH host key; defaults to `~/.ssh/known_hosts`. Verification is on unless `insecure_ignore_host_key` is set."},
					"insecure_ignore_host_key": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Skip SSH host key verification. Only for throw-away lab hosts: it lets anyone on the path impersonate the host."},
				}},
			},
			"pool":        schema.StringAttribute{Optional: true, MarkdownDescription: "Default storage pool for proxy volumes; `default` when unset."},
			"base_volume": schema.StringAttribute{Optional: true, MarkdownDescription: "Default base image volume (in the pool) that each proxy's root disk is a copy-on-write overlay of."},
			"network":     schema.StringAttribute{Optional: true, MarkdownDescription: "Default libvirt network for the proxy's interface; `default` when unset."},
			"domain_type": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Domain type: `kvm`, `qemu` (software emulation) or `auto` (kvm where the host offers it). Defaults to `auto`.",
				Validators:          []validator.String{stringvalidator.OneOf(kvm.DomainTypes...)}},
		},
	}
}

// defaultFactories builds the real backends. A backend that has no implementation in this build yet is
// reported when a resource first uses it, with the class Permanent and what to do.
func defaultFactories(cfg providerModel) (map[backend.Kind]backend.Factory, error) {
	factories := map[backend.Kind]backend.Factory{}
	if cfg.Kubernetes != nil {
		factories[backend.KindKubernetes] = kubernetesFactory(cfg.Kubernetes)
	}
	if cfg.GCP != nil {
		factories[backend.KindGCP] = unavailable(backend.KindGCP)
	}
	if cfg.KVM != nil {
		kvmConfig := kvmBackendConfig(cfg.KVM)
		factories[backend.KindKVM] = func(context.Context) (backend.Backend, error) { return kvm.New(kvmConfig) }
	}
	return factories, nil
}

func unavailable(kind backend.Kind) backend.Factory {
	return func(context.Context) (backend.Backend, error) {
		return nil, backend.Permanent(string(kind)+" backend",
			"this version of the provider does not include the %s backend yet; use a provider version that lists it in its CHANGELOG", kind)
	}
}

// kvmBackendConfig maps the provider block onto the backend's configuration; an empty host map means one host
// named "local" at LIBVIRT_DEFAULT_URI, which the backend resolves.
func kvmBackendConfig(m *kvmProviderModel) kvm.Config {
	cfg := kvm.Config{
		Hosts: map[string]kvm.HostConfig{}, Pool: m.Pool.ValueString(), BaseVolume: m.BaseVolume.ValueString(),
		Network: m.Network.ValueString(), DomainType: m.DomainType.ValueString(),
	}
	for name, h := range m.Hosts {
		cfg.Hosts[name] = kvm.HostConfig{
			URI: h.URI.ValueString(), SSHKeyFile: h.SSHKeyFile.ValueString(),
			SSHKnownHostsFile: h.KnownHostsFile.ValueString(), InsecureIgnoreHostKey: h.InsecureIgnoreHostKey.ValueBool(),
		}
	}
	return cfg
}
