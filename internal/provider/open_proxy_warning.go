package provider

import (
	"context"
	"net/netip"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// openProxyWarning warns, at plan time and on every backend, about a proxy that admits every address
// (0.0.0.0/0 or ::/0 in allowed_client_cidrs) and asks for no credentials: anyone who can reach its address
// may send traffic to the allowed destinations from the proxy's egress address, which the destinations may
// trust. A warning, not an error: behind a firewall that already narrows the clients it can be what is meant.
type openProxyWarning struct{}

var _ resource.ConfigValidator = openProxyWarning{}

const openProxyDescription = "warns when allowed_client_cidrs admits every address (0.0.0.0/0 or ::/0) and auth is not set"

func (openProxyWarning) Description(context.Context) string { return openProxyDescription }

func (openProxyWarning) MarkdownDescription(context.Context) string { return openProxyDescription }

func (openProxyWarning) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var clients types.Set
	var auth types.Object
	diags := req.Config.GetAttribute(ctx, path.Root("allowed_client_cidrs"), &clients)
	diags.Append(req.Config.GetAttribute(ctx, path.Root("auth"), &auth)...)
	// An auth block not known yet may well be set: no warning on a guess.
	if diags.HasError() || !auth.IsNull() || clients.IsNull() || clients.IsUnknown() {
		return
	}
	var everyone []string
	for _, e := range clients.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		if p, err := netip.ParsePrefix(s.ValueString()); err == nil && p.Bits() == 0 {
			everyone = append(everyone, p.String())
		}
	}
	if len(everyone) == 0 {
		return
	}
	resp.Diagnostics.AddAttributeWarning(path.Root("allowed_client_cidrs"), "Proxy open to every address without authentication",
		"allowed_client_cidrs contains "+strings.Join(everyone, " and ")+" and auth is not set: anyone who can reach the proxy's "+
			"address can use it to reach the allowed destinations, from the proxy's egress address. List only the clients' "+
			"ranges, or set auth (with tls, so the credentials are not sent in clear).")
}
