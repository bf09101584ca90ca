package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// AllowedPrivateCIDR accepts a canonical range inside one of the private ranges the proxy refuses by default.
func AllowedPrivateCIDR() validator.String {
	return stringFunc{"allowed private CIDR", proxyconf.ValidateAllowedPrivateCIDR}
}

// TLSKeyPair checks a tls object's certificate_pem and its key (private_key_pem, or the write-only
// private_key_pem_wo, which validation still sees) together: PEM, unencrypted, and one key pair. Either unknown
// at plan time (from another resource) leaves the check to the apply.
func TLSKeyPair() validator.Object { return tlsKeyPair{} }

type tlsKeyPair struct{}

var _ validator.Object = tlsKeyPair{}

const tlsKeyPairDescription = "certificate_pem (the certificate, then any intermediates) and private_key_pem form one unencrypted key pair"

func (tlsKeyPair) Description(context.Context) string         { return tlsKeyPairDescription }
func (tlsKeyPair) MarkdownDescription(context.Context) string { return tlsKeyPairDescription }

func (tlsKeyPair) ValidateObject(_ context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	cert, ok1 := attrs["certificate_pem"].(types.String)
	key, ok2 := attrs["private_key_pem"].(types.String)
	if wo, ok := attrs["private_key_pem_wo"].(types.String); ok2 && ok && key.IsNull() {
		key = wo
	}
	if !ok1 || !ok2 || cert.IsNull() || cert.IsUnknown() || key.IsNull() || key.IsUnknown() {
		return
	}
	if err := proxyconf.ValidateTLS(cert.ValueString(), key.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid TLS certificate or key", fmt.Sprintf("Attribute %s: %v", req.Path, err))
	}
}
