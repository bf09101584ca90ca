package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// kvmHost accepts what the kvm backend accepts as a host's name.
func kvmHost() validator.String {
	return attribute_validator.Func("kvm host name", kvm.ValidateHostName)
}

// syslogTarget accepts what the kvm backend forwards the access log to: udp://HOST:PORT or tcp://HOST:PORT.
func syslogTarget() validator.String {
	return attribute_validator.Func("syslog target", kvm.ValidateSyslogTarget)
}

// libvirtURI accepts the libvirt URIs the kvm backend can dial.
func libvirtURI() validator.String { return attribute_validator.Func("libvirt URI", kvm.ValidateURI) }

// libvirtTransport refuses a libvirt URI whose connection anyone on the path could read or take over
// (qemu+tcp://, no_verify=1) unless the host's sibling attribute insecure is true: the kvm backend's own
// rule (kvm.ValidateTransport), which it applies again before it dials.
func libvirtTransport() validator.String { return libvirtTransportValidator{} }

type libvirtTransportValidator struct{}

var _ validator.String = libvirtTransportValidator{}

const libvirtTransportDescription = "a transport that encrypts and verifies the host, unless the host sets insecure = true"

func (libvirtTransportValidator) Description(context.Context) string {
	return libvirtTransportDescription
}
func (libvirtTransportValidator) MarkdownDescription(context.Context) string {
	return libvirtTransportDescription
}

func (libvirtTransportValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var insecure types.Bool
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, req.Path.ParentPath().AtName("insecure"), &insecure)...)
	if resp.Diagnostics.HasError() || insecure.IsUnknown() {
		return
	}
	if err := kvm.ValidateTransport(req.ConfigValue.ValueString(), insecure.ValueBool()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Insecure libvirt transport", fmt.Sprintf("Attribute %s: %v.", req.Path, err))
	}
}

// kvmInstances refuses, on the instances attribute, more than one instance with what cannot serve them: the
// kvm backend's own rule (kvm.ValidateInstances), read from the sibling attributes.
func kvmInstances() validator.Int64 { return kvmInstancesValidator{} }

type kvmInstancesValidator struct{}

var _ validator.Int64 = kvmInstancesValidator{}

const kvmInstancesDescription = "more than one instance only on a libvirt network, without user_net, bridge, mac or ip"

func (kvmInstancesValidator) Description(context.Context) string { return kvmInstancesDescription }
func (kvmInstancesValidator) MarkdownDescription(context.Context) string {
	return kvmInstancesDescription
}

func (kvmInstancesValidator) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueInt64() <= 1 {
		return
	}
	opts := kvm.Options{Instances: int(req.ConfigValue.ValueInt64())}
	var userNet types.Bool
	var bridge, mac, ip types.String
	parent := req.Path.ParentPath()
	for name, target := range map[string]any{"user_net": &userNet, "bridge": &bridge, "mac": &mac, "ip": &ip} {
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, parent.AtName(name), target)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	opts.UserNet, opts.Bridge, opts.MAC, opts.IP = userNet.ValueBool(), bridge.ValueString(), mac.ValueString(), ip.ValueString()
	if err := kvm.ValidateInstances(opts); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid kvm instances", fmt.Sprintf("Attribute %s: %v.", req.Path, err))
	}
}

// sameInstances finds an instances the state lacks (written before the attribute existed) the same as one:
// such a proxy is one VM, and planning the default against it must not replace it.
func sameInstances(_ context.Context, prior, planned map[string]attr.Value) bool {
	before, _ := prior["instances"].(types.Int64)
	after, _ := planned["instances"].(types.Int64)
	return before.IsNull() && !after.IsUnknown() && after.ValueInt64() == kvm.DefaultInstances
}

// instancesAddedLater keeps the null of a state written before instances existed while the configuration
// leaves it to its default, so a plan without refresh shows no change; a refresh reads the value back
// (setResolved).
type instancesAddedLater struct{}

func (instancesAddedLater) Description(context.Context) string {
	return "an existing proxy's state without the attribute keeps it unset while the configuration leaves it to its default"
}

func (d instancesAddedLater) MarkdownDescription(ctx context.Context) string {
	return d.Description(ctx)
}

func (instancesAddedLater) PlanModifyInt64(_ context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if req.State.Raw.IsNull() || !req.StateValue.IsNull() || !req.ConfigValue.IsNull() {
		return
	}
	resp.PlanValue = types.Int64Null()
}
