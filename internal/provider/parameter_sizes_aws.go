package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// awsParameterSizes refuses at plan time, on allowed_destinations (what makes a proxy's configuration long), a
// proxy whose SSM parameters no tier can hold: the backend renders them as it would write them and measures
// each. It sits on the aws attribute, since only a proxy placed there keeps its configuration in SSM; a
// configuration with values not known yet is checked when they are.
type awsParameterSizes struct{}

var _ validator.Object = awsParameterSizes{}

func (awsParameterSizes) Description(context.Context) string {
	return "each of the proxy's SSM parameters fits an SSM parameter (8 KB)"
}

func (v awsParameterSizes) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (awsParameterSizes) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var m proxyResourceModel
	if d := m.read(ctx, req.Config); d.HasError() {
		return
	}
	if m.AllowedDestinations.IsUnknown() || m.AllowedClientCIDRs.IsUnknown() || m.AllowedPorts.IsUnknown() {
		return
	}
	w, d := readWriteOnly(ctx, req.Config)
	if d.HasError() {
		return
	}
	s, d := m.settings(ctx, w)
	if d.HasError() {
		return
	}
	if s.Port == 0 {
		s.Port = proxyconf.DefaultPort // unset in the configuration: its default, whose length is the proxy's as well
	}
	a, ok := m.block.(*awsPlacementModel)
	if !ok {
		return
	}
	o, _ := a.placement().Options.(*aws.Options)
	if o == nil {
		return
	}
	if err := aws.CheckParameterSizes(m.Name.ValueString(), s, *o); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("allowed_destinations"), "Proxy configuration too large for SSM",
			err.Error()+". On aws the proxy's rules are kept in SSM parameters: list fewer destinations (a domain with a leading "+
				"dot, .example.com, covers its subdomains), or split them across proxies.")
	}
}
