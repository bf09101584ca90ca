package provider

import (
	"context"
	"errors"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// awsParameterSizes refuses at plan time a proxy whose SSM parameters SSM cannot hold: the backend renders
// and packs them as it would write them (aws.CheckParameterSizes: the config and the settings, compressed,
// in at most nine Standard parameters each; the secrets in one SecureString of 8 KB), and the error names
// the attribute that takes the most and how much of it to remove. It sits on the aws attribute, since only
// a proxy placed there keeps its configuration in SSM; a configuration with values not known yet is checked
// when they are.
type awsParameterSizes struct{}

var _ validator.Object = awsParameterSizes{}

func (awsParameterSizes) Description(context.Context) string {
	return "the proxy's configuration, compressed, fits its SSM parameters"
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
	if m.AllowedDestinations.IsUnknown() || m.AllowedClientCIDRs.IsUnknown() || m.AllowedPorts.IsUnknown() || m.AllowedPrivateCIDRs.IsUnknown() {
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
	var tooLarge *aws.ParameterSizeError
	if err := aws.CheckParameterSizes(m.Name.ValueString(), s, *o); errors.As(err, &tooLarge) {
		detail := err.Error() + "."
		if tooLarge.Parameter != awsguest.ParameterSecrets {
			detail += " On aws the proxy's rules are kept in SSM parameters: list fewer destinations (a domain with a leading " +
				"dot, .example.com, covers its subdomains), or split them across proxies."
		}
		resp.Diagnostics.AddAttributeError(awsSizeAttribute(tooLarge.Attribute, m.TLS), "Proxy configuration too large for SSM", detail)
	}
}

// awsSizeAttribute is the path of the attribute a ParameterSizeError names: allowed_destinations when it
// names none; the key attribute the configuration sets, for the TLS key.
func awsSizeAttribute(attribute string, tls *tlsModel) path.Path {
	switch attribute {
	case "":
		return path.Root("allowed_destinations")
	case "tls.certificate_pem", "tls.client_ca_pem", "tls.client_crl_pem":
		return path.Root("tls").AtName(strings.TrimPrefix(attribute, "tls."))
	case "tls.private_key_pem":
		if tls != nil && tls.PrivateKeyPEM.IsNull() {
			return path.Root("tls").AtName("private_key_pem_wo")
		}
		return path.Root("tls").AtName("private_key_pem")
	}
	return path.Root(attribute)
}
