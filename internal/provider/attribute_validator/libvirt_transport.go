package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// LibvirtTransport refuses a libvirt URI whose connection anyone on the path could read or take over
// (qemu+tcp://, no_verify=1) unless the host's sibling attribute insecure is true: the kvm backend's own
// rule (kvm.ValidateTransport), which it applies again before it dials.
func LibvirtTransport() validator.String { return libvirtTransport{} }

type libvirtTransport struct{}

var _ validator.String = libvirtTransport{}

const libvirtTransportDescription = "a transport that encrypts and verifies the host, unless the host sets insecure = true"

func (libvirtTransport) Description(context.Context) string { return libvirtTransportDescription }
func (libvirtTransport) MarkdownDescription(context.Context) string {
	return libvirtTransportDescription
}

func (libvirtTransport) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
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
