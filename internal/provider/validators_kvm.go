package provider

import (
	"context"
	"fmt"

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
