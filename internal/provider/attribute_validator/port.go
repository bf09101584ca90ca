package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

type port struct{}

// Port accepts a TCP port number.
func Port() validator.Int64 { return port{} }

func (port) Description(context.Context) string         { return "TCP port between 1 and 65535" }
func (port) MarkdownDescription(context.Context) string { return "TCP port between 1 and 65535" }

func (port) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := proxyconf.ValidatePort(int(req.ConfigValue.ValueInt64())); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid port", fmt.Sprintf("Attribute %s: %v", req.Path, err))
	}
}
