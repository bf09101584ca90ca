// Package attribute_validator holds the provider's plan-time validators. Each delegates to the check the
// backend or renderer itself uses, so what passes plan is exactly what the apply accepts.
package attribute_validator

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// stringFunc adapts a check of the form func(string) error into a string validator.
type stringFunc struct {
	description string
	check       func(string) error
}

var _ validator.String = stringFunc{}

func (v stringFunc) Description(context.Context) string         { return v.description }
func (v stringFunc) MarkdownDescription(context.Context) string { return v.description }

func (v stringFunc) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		// The path goes in the text too: CLIs quote only the enclosing block's line for nested attributes.
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.description, fmt.Sprintf("Attribute %s: %v", req.Path, err))
	}
}

// Name accepts names valid on every backend.
func Name() validator.String { return stringFunc{"proxy name", backend.ValidateName} }

// NameOf accepts a name valid on every backend, what names: "kubernetes namespace", "gcp zone".
func NameOf(what string) validator.String { return stringFunc{what, backend.ValidateName} }

// LabelKey accepts label keys valid on every backend and not reserved.
func LabelKey() validator.String { return stringFunc{"label key", backend.ValidateLabelKey} }

// LabelValue accepts label values valid on every backend.
func LabelValue() validator.String { return stringFunc{"label value", backend.ValidateLabelValue} }

// Destination accepts a host name or a ".suffix" domain.
func Destination() validator.String {
	return stringFunc{"destination", proxyconf.ValidateDestination}
}

// ClientCIDR accepts a canonical CIDR range.
func ClientCIDR() validator.String { return stringFunc{"client CIDR", proxyconf.ValidateClientCIDR} }

// Username accepts a proxy user name that cannot break the htpasswd file.
func Username() validator.String { return stringFunc{"username", proxyconf.ValidateUsername} }

// Password accepts a proxy password basic auth and bcrypt can carry.
func Password() validator.String { return stringFunc{"password", proxyconf.ValidatePassword} }

// ProviderID accepts the string form of an id of one of forms.
func ProviderID(forms backend.IDForms) validator.String {
	return stringFunc{"id", func(s string) error { _, err := forms.Parse(s); return err }}
}

// Duration accepts a Go duration that is not negative, such as "10m" or "1h30m".
func Duration() validator.String {
	return stringFunc{"duration", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		if d < 0 {
			return errNegative
		}
		return nil
	}}
}

// NotEmpty rejects the empty string.
func NotEmpty() validator.String {
	return stringFunc{"value", func(s string) error {
		if s == "" {
			return errEmpty
		}
		return nil
	}}
}

// Func accepts what check accepts, its error naming what is wrong; what names the value in the message
// ("region"). A backend's own schema validates with its package's checks through it, so that adding a
// backend adds nothing here.
func Func(what string, check func(string) error) validator.String { return stringFunc{what, check} }
