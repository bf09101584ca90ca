package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// RuleSetName accepts a rule set's name.
func RuleSetName() validator.String {
	return stringFunc{"rule set name", proxyconf.ValidateRuleSetName}
}

// CertificateSubject accepts a client certificate's subject common name a rule set can match.
func CertificateSubject() validator.String {
	return stringFunc{"certificate subject", proxyconf.ValidateCertificateSubject}
}

// ClientCA accepts CA certificates in PEM that can verify the proxy's clients.
func ClientCA() validator.String {
	return stringFunc{"client CA", func(ca string) error { return proxyconf.ValidateClientCA(ca, "") }}
}

// ClientCRL accepts revocation lists in PEM signed by the client CA at ca; while that CA is unset, unknown or
// itself invalid (its own attribute says so), it leaves the list to the apply.
func ClientCRL(ca path.Expression) validator.String { return clientCRL{ca} }

type clientCRL struct{ ca path.Expression }

func (v clientCRL) Description(context.Context) string {
	return fmt.Sprintf("revocation lists in PEM signed by a CA of %s", v.ca)
}
func (v clientCRL) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v clientCRL) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	paths, diags := req.Config.PathMatches(ctx, req.PathExpression.Merge(v.ca))
	resp.Diagnostics.Append(diags...)
	for _, p := range paths {
		var ca types.String
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, p, &ca)...)
		if ca.IsNull() || ca.IsUnknown() || proxyconf.ValidateClientCA(ca.ValueString(), "") != nil {
			continue
		}
		if err := proxyconf.ValidateClientCA(ca.ValueString(), req.ConfigValue.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(req.Path, "Invalid client CRL", fmt.Sprintf("Attribute %s: %v", req.Path, err))
		}
	}
}
