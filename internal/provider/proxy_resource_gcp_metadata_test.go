package provider

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A metadata limit the settings would break is reported on the attribute that weighs most, with the limit.
func TestGCPMetadataLimitDiagnostic(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err    error
		at     path.Path
		detail string
		ok     bool
	}{
		"rules over the total": {&gcp.MetadataLimitError{Size: 600_000, Limit: gcp.MaxMetadataTotalBytes},
			path.Root("allowed_destinations"), "Attribute allowed_destinations: the instance metadata would total 600000 bytes", true},
		"squid.conf over a value": {fmt.Errorf("create: %w", &gcp.MetadataLimitError{Key: gcpguest.MetadataSquidConf, Size: 300_000, Limit: gcp.MaxMetadataValueBytes}),
			path.Root("allowed_destinations"), "key egress-squid-conf would hold 300000 bytes", true},
		"certificate chain": {&gcp.MetadataLimitError{Key: gcpguest.MetadataTLSCert, Size: 300_000, Limit: gcp.MaxMetadataValueBytes, TLS: true},
			path.Root("tls").AtName("certificate_pem"), "Attribute tls.certificate_pem: the instance metadata key egress-tls-cert", true},
		"another error": {errors.New("squid.conf: bad destination"), path.Empty(), "", false},
		"none":          {nil, path.Empty(), "", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			at, detail, ok := gcpMetadataLimitDiagnostic(tc.err)
			if ok != tc.ok || !at.Equal(tc.at) || !strings.Contains(detail, tc.detail) {
				t.Fatalf("= %s, %q, %v; want %s, %q, %v", at, detail, ok, tc.at, tc.detail, tc.ok)
			}
			if ok && !strings.Contains(detail, strconv.Itoa(gcp.MaxMetadataTotalBytes)) {
				t.Errorf("detail %q does not give Compute Engine's limits", detail)
			}
		})
	}
}

// The largest settings the schema admits (every list at its limit, every entry at its longest, a TLS chain
// of the largest size) pass the plan-time metadata check and are accepted by the Compute fake, which
// enforces the documented metadata limits.
func TestAccProxyGCP_largestSettings(t *testing.T) {
	fake := gcpFake(t)
	quoted := func(values []string) string {
		q := make([]string, len(values))
		for i, v := range values {
			q[i] = strconv.Quote(v)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	var dests, clients, private, ports []string
	for i := range proxyconf.MaxAllowedDestinations {
		dests = append(dests, fmt.Sprintf(".d%03d%s.%s.%s.%s", i, strings.Repeat("a", 59), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("e", 61)))
	}
	for i := range proxyconf.MaxAllowedClientCIDRs {
		clients = append(clients, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789a:%04x/128", 0xb000+i))
	}
	for i := range proxyconf.MaxAllowedPrivateCIDRs {
		private = append(private, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789b:%04x/128", 0xc000+i))
	}
	for i := range proxyconf.MaxAllowedPorts {
		ports = append(ports, strconv.Itoa(60000+i))
	}
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	for {
		more, _ := testutil.SelfSignedPEM(t, "ca.test")
		if len(cert)+len(more) > 16*1024 {
			break
		}
		cert += more
	}
	body := fmt.Sprintf(`  name                  = "egress-largest"
  gcp                   = {}
  allowed_client_cidrs  = %s
  allowed_destinations  = %s
  allowed_private_cidrs = %s
  allowed_ports         = [%s]
  auth                  = { username = %q, password = "correct-horse-battery" }
  tls                   = { certificate_pem = %s, private_key_pem = %s }`,
		quoted(clients), quoted(dests), quoted(private), strings.Join(ports, ", "), strings.Repeat("u", 64), strconv.Quote(cert), strconv.Quote(key))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{{
			Config: gcpConfig(fake, "acc-token", body),
			Check: func(*terraform.State) error {
				if fake.Instance(gcpTestProject, "us-central1-a", "egress-largest") == nil {
					return errors.New("the instance was not made")
				}
				return nil
			},
		}},
	})
}

// resourceConfig is a configuration of egress_proxy with the given top-level values and every other attribute
// null, as the CLI sends one to validation.
func resourceConfig(t *testing.T, values map[string]tftypes.Value) tfsdk.Config {
	t.Helper()
	ctx := context.Background()
	s := proxyResourceSchema(ctx)
	typ, ok := s.Type().TerraformType(ctx).(tftypes.Object)
	if !ok {
		t.Fatal("the resource schema is not an object")
	}
	all := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		all[name] = tftypes.NewValue(at, nil)
		if v, set := values[name]; set {
			all[name] = v
		}
	}
	return tfsdk.Config{Schema: s, Raw: tftypes.NewValue(typ, all)}
}

// emptyObject is an object of the attribute's type with every attribute null: `gcp = {}`.
func emptyObject(t *testing.T, attribute string) tftypes.Value {
	t.Helper()
	ctx := context.Background()
	typ, _ := proxyResourceSchema(ctx).Type().TerraformType(ctx).(tftypes.Object)
	ot, ok := typ.AttributeTypes[attribute].(tftypes.Object)
	if !ok {
		t.Fatalf("%s is not an object attribute", attribute)
	}
	vals := map[string]tftypes.Value{}
	for name, at := range ot.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
	}
	return tftypes.NewValue(ot, vals)
}

// The plan-time check runs on the settings the configuration holds and puts the limit's error on the
// attribute at fault; it waits for unknown values, and leaves other errors to the settings' own validators.
func TestGCPMetadataFitsValidator(t *testing.T) {
	t.Parallel()
	set := func(values ...string) tftypes.Value {
		var elems []tftypes.Value
		for _, v := range values {
			elems = append(elems, tftypes.NewValue(tftypes.String, v))
		}
		return tftypes.NewValue(tftypes.Set{ElementType: tftypes.String}, elems)
	}
	unknownSet := tftypes.NewValue(tftypes.Set{ElementType: tftypes.String}, tftypes.UnknownValue)
	for name, tc := range map[string]struct {
		dests     tftypes.Value
		result    error
		real      bool // the real check, no stand-in
		wantAt    string
		wantCheck bool
	}{
		"rules over the limit": {dests: set(".example.com"), result: &gcp.MetadataLimitError{Size: 600_000, Limit: gcp.MaxMetadataTotalBytes},
			wantAt: "allowed_destinations", wantCheck: true},
		"certificate over the limit": {dests: set(".example.com"), result: &gcp.MetadataLimitError{Key: gcpguest.MetadataTLSCert, Size: 300_000, Limit: gcp.MaxMetadataValueBytes, TLS: true},
			wantAt: "tls.certificate_pem", wantCheck: true},
		"another error":          {dests: set(".example.com"), result: errors.New("render: bad"), wantCheck: true},
		"fits":                   {dests: set(".example.com"), wantCheck: true},
		"destinations not known": {dests: unknownSet, result: &gcp.MetadataLimitError{Size: 1, Limit: 1}},
		"the real check":         {dests: set(".example.com", "api.example.org"), real: true, wantCheck: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := resourceConfig(t, map[string]tftypes.Value{
				"gcp": emptyObject(t, "gcp"), "allowed_destinations": tc.dests, "allowed_client_cidrs": set("10.0.0.0/8"),
			})
			var obj types.Object
			if d := cfg.GetAttribute(ctx, path.Root("gcp"), &obj); d.HasError() {
				t.Fatal(d)
			}
			called := false
			v := gcpMetadataFits{check: func(s proxyconf.Settings, g gcp.Options) error {
				called = true
				if len(s.AllowedDestinations) == 0 || s.AllowedDestinations[0] != ".example.com" || g.Image != gcp.DefaultImage {
					t.Errorf("checked settings %v on image %q, not the configuration's", s.AllowedDestinations, g.Image)
				}
				return tc.result
			}}
			if tc.real {
				// The real check, which must render the configuration's settings with the schema's defaults.
				v = gcpMetadataFits{check: func(s proxyconf.Settings, g gcp.Options) error {
					called = true
					err := gcp.CheckMetadata(s, g)
					if err != nil {
						t.Errorf("the configuration's settings did not render: %v", err)
					}
					return err
				}}
			}
			resp := &validator.ObjectResponse{}
			v.ValidateObject(ctx, validator.ObjectRequest{Path: path.Root("gcp"), Config: cfg, ConfigValue: obj}, resp)
			if called != tc.wantCheck {
				t.Errorf("check called %v, want %v", called, tc.wantCheck)
			}
			errs := resp.Diagnostics.Errors()
			switch {
			case tc.wantAt == "" && len(errs) > 0:
				t.Fatalf("diagnostics %v, want none", errs)
			case tc.wantAt != "" && len(errs) != 1:
				t.Fatalf("diagnostics %v, want one on %s", errs, tc.wantAt)
			case tc.wantAt != "":
				d, ok := errs[0].(diag.DiagnosticWithPath)
				if !ok || d.Path().String() != tc.wantAt || errs[0].Summary() != "Proxy settings too large for Compute Engine metadata" {
					t.Fatalf("diagnostic %v, want it on %s", errs[0], tc.wantAt)
				}
			}
		})
	}
}
