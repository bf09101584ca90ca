package provider

import (
	"context"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// guardSettings adds the destination guards, TLS and the per-client limit to s; privateKeyWO is the write-only
// key, used when private_key_pem is not set.
func (m proxyResourceModel) guardSettings(ctx context.Context, s *proxyconf.Settings, privateKeyWO types.String) diag.Diagnostics {
	var diags diag.Diagnostics
	if !m.AllowedPrivateCIDRs.IsNull() && !m.AllowedPrivateCIDRs.IsUnknown() {
		diags.Append(m.AllowedPrivateCIDRs.ElementsAs(ctx, &s.AllowedPrivateCIDRs, false)...)
		sort.Strings(s.AllowedPrivateCIDRs)
	}
	if !m.MaxConnectionsPerClient.IsNull() && !m.MaxConnectionsPerClient.IsUnknown() {
		s.MaxConnectionsPerClient = int(m.MaxConnectionsPerClient.ValueInt64())
	}
	if m.TLS != nil {
		key := m.TLS.PrivateKeyPEM.ValueString()
		if m.TLS.PrivateKeyPEM.IsNull() {
			key = privateKeyWO.ValueString()
		}
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: m.TLS.CertificatePEM.ValueString(), PrivateKeyPEM: key}
	}
	return diags
}

// setGuardSettings fills the guard attributes from what the backend reports only where the model has no value
// (an import): backends that do not store them yet report them empty, which must not show as drift. The TLS
// key is never read back.
func (m *proxyResourceModel) setGuardSettings(s proxyconf.Settings) diag.Diagnostics {
	var diags diag.Diagnostics
	if m.AllowedPrivateCIDRs.IsNull() || m.AllowedPrivateCIDRs.IsUnknown() {
		m.AllowedPrivateCIDRs = stringSet(s.AllowedPrivateCIDRs, &diags)
	}
	if m.MaxConnectionsPerClient.IsNull() || m.MaxConnectionsPerClient.IsUnknown() {
		n := s.MaxConnectionsPerClient
		if n == 0 {
			n = proxyconf.DefaultMaxConnectionsPerClient
		}
		m.MaxConnectionsPerClient = types.Int64Value(int64(n))
	}
	return diags
}
