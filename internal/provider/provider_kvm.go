package provider

import (
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The provider-level settings of the kvm backend: the libvirt hosts and how to reach them.

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
	SSHConfigFile         types.String `tfsdk:"ssh_config_file"`
	InsecureIgnoreHostKey types.Bool   `tfsdk:"insecure_ignore_host_key"`
	Insecure              types.Bool   `tfsdk:"insecure"`
	ConnectTimeout        types.String `tfsdk:"connect_timeout"`
}

// Environment fallback, as the libvirt tools read it.
const (
	libvirtURIEnvVar = "LIBVIRT_DEFAULT_URI"
	defaultKVMHost   = kvm.DefaultHostName
)

func kvmProviderSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "KVM/libvirt backend: the libvirt hosts proxies may be placed on.",
		Attributes: map[string]schema.Attribute{
			"hosts": schema.MapNestedAttribute{
				Optional: true,
				MarkdownDescription: "Hosts by the name resources use in `kvm.host`. When empty, one host named `" + defaultKVMHost +
					"` is reached at `" + libvirtURIEnvVar + "`, or `qemu:///system`.",
				Validators: []validator.Map{mapvalidator.KeysAre(kvmHost())},
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"uri": schema.StringAttribute{Required: true,
						MarkdownDescription: "libvirt URI: `qemu:///system`, `qemu+ssh://user@host/system`, `qemu+tls://host/system` or `test:///default`; " +
							"`qemu+tcp://host/system`, or `no_verify=1` on a remote URI, only with `insecure = true`. A `qemu+ssh://` host may be an " +
							"alias of the ssh configuration (`ssh_config_file`). `?socket=/path` names the daemon's unix socket (on the remote host " +
							"for ssh); it defaults to `" + kvm.DefaultSocket + "`.",
						Validators: []validator.String{libvirtURI(), libvirtTransport()}},
					"insecure": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Accept a `uri` whose connection anyone on the path can read or take over: `qemu+tcp://` (no encryption, " +
							"no authentication of the host) or `no_verify=1` (the host's TLS certificate or SSH host key unchecked). Creating a proxy " +
							"sends its seed ISO over this connection, and the ISO carries the proxy's htpasswd hash and TLS private key: on such a " +
							"connection others can read them, or pose as the host. Only for lab hosts, or a link protected otherwise (a VPN). " +
							"Defaults to `false`."},
					"ssh_key_file": schema.StringAttribute{Optional: true,
						MarkdownDescription: "Private key for `qemu+ssh://` URIs, tried before the ssh configuration's `IdentityFile` entries for this host " +
							"(not for its jump hosts, as `ssh -i`)."},
					"known_hosts_file": schema.StringAttribute{Optional: true,
						MarkdownDescription: "known_hosts file that verifies the SSH host key; defaults to the ssh configuration's `UserKnownHostsFile`, " +
							"else `~/.ssh/known_hosts`. Verification is on unless `insecure_ignore_host_key` is set."},
					"ssh_config_file": schema.StringAttribute{Optional: true,
						MarkdownDescription: "ssh client configuration a `qemu+ssh://` host is looked up in, as `ssh -F` reads it: `Host` aliases and " +
							"patterns, `HostName`, `User`, `Port`, `IdentityFile`, `ProxyJump`, `UserKnownHostsFile`. Defaults to `~/.ssh/config`, " +
							"then `/etc/ssh/ssh_config`; `none` reads none. The URI's user and port come first, as libvirt passes them to ssh."},
					"insecure_ignore_host_key": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Skip SSH host key verification of this host (jump hosts are verified all the same). " +
							"Only for throw-away lab hosts: it lets anyone on the path impersonate the host."},
					"connect_timeout": schema.StringAttribute{Optional: true,
						MarkdownDescription: "How long connecting to the host is retried before the host counts as unreachable and the operation fails, " +
							"as a Go duration. Defaults to `" + kvm.DefaultDialTimeout.String() + "`.",
						Validators: []validator.String{attribute_validator.Duration()}},
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

// kvmBackendConfig maps the provider block onto the backend's configuration; an empty host map means one host
// named "local" at LIBVIRT_DEFAULT_URI, which the backend resolves.
func kvmBackendConfig(m *kvmProviderModel) kvm.Config {
	cfg := kvm.Config{
		Hosts: map[string]kvm.HostConfig{}, Pool: m.Pool.ValueString(), BaseVolume: m.BaseVolume.ValueString(),
		Network: m.Network.ValueString(), DomainType: m.DomainType.ValueString(),
	}
	for name, h := range m.Hosts {
		// The validator has accepted the duration; an unset one leaves the backend's default.
		connectTimeout, _ := time.ParseDuration(h.ConnectTimeout.ValueString())
		cfg.Hosts[name] = kvm.HostConfig{
			URI: h.URI.ValueString(), SSHKeyFile: h.SSHKeyFile.ValueString(),
			SSHKnownHostsFile: h.KnownHostsFile.ValueString(), SSHConfigFile: h.SSHConfigFile.ValueString(),
			InsecureIgnoreHostKey: h.InsecureIgnoreHostKey.ValueBool(), Insecure: h.Insecure.ValueBool(), DialTimeout: connectTimeout,
		}
	}
	return cfg
}
