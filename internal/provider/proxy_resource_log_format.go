package provider

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// The access log's format (issue 40): log_format. A new proxy logs JSON; a proxy made before the attribute
// existed keeps the text line it has always logged, so that whatever reads its log keeps working and upgrading
// the provider plans nothing: the state upgrader below records "text" for it, and the plan keeps what the
// state has unless the configuration says otherwise.

// proxyResourceSchemaVersion is the egress_proxy schema's version: 1 since log_format, whose upgrader from 0
// records the text format every earlier proxy logs.
const proxyResourceSchemaVersion = 1

var _ resource.ResourceWithUpgradeState = (*proxyResource)(nil)

// newProxyLogFormat is what a proxy created without log_format logs.
const newProxyLogFormat = proxyconf.LogFormatJSON

func logFormatAttributes() map[string]schema.Attribute {
	values, quoted := make([]string, len(proxyconf.LogFormats)), make([]string, len(proxyconf.LogFormats))
	for i, f := range proxyconf.LogFormats {
		values[i], quoted[i] = string(f), "`"+string(f)+"`"
	}
	return map[string]schema.Attribute{
		"log_format": schema.StringAttribute{
			Optional: true, Computed: true,
			MarkdownDescription: fmt.Sprintf("The access log's format: %s. `json` is one JSON object a request, whose fields the "+
				"access log guide documents; `text` is the key=value line of earlier versions. A new proxy defaults to `%s`; a proxy "+
				"created by a version before this attribute keeps `text` until the configuration sets it. ", orList(quoted), newProxyLogFormat) +
				reconfigurableDescription,
			PlanModifiers: []planmodifier.String{logFormatOnCreate{}, stringplanmodifier.UseStateForUnknown(), stringRequiresReplaceUnlessReconfigurable()},
			Validators:    []validator.String{stringvalidator.OneOf(values...)},
		},
	}
}

// logFormatOnCreate plans newProxyLogFormat for a proxy being created without log_format. A Default would not
// do: it applies whenever the configuration leaves the attribute out, so it would turn an existing proxy's
// "text" into "json" on the first plan after an upgrade. A proxy that exists keeps its state's value
// (UseStateForUnknown, after this).
type logFormatOnCreate struct{}

func (logFormatOnCreate) Description(context.Context) string {
	return fmt.Sprintf("A new proxy logs %q unless configured otherwise.", newProxyLogFormat)
}

func (m logFormatOnCreate) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (logFormatOnCreate) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() && req.ConfigValue.IsNull() && resp.PlanValue.IsUnknown() {
		resp.PlanValue = types.StringValue(string(newProxyLogFormat))
	}
}

// logSettings puts the planned format into s. "text" is the zero value, which the backends keep as they kept
// every setting before the format existed.
func (m proxyResourceModel) logSettings(s *proxyconf.Settings) {
	if f := proxyconf.LogFormat(m.LogFormat.ValueString()); f == proxyconf.LogFormatJSON {
		s.LogFormat = f
	}
}

// setLogSettings records the format the backend reports.
func (m *proxyResourceModel) setLogSettings(s proxyconf.Settings) {
	f := s.LogFormat
	if f == "" {
		f = proxyconf.LogFormatText
	}
	m.LogFormat = types.StringValue(string(f))
}

// UpgradeState reads a state of version 0 as it is, with log_format "text": every proxy made before version 1
// logs the text line. It works on the raw JSON (no PriorSchema), since nothing else changed.
func (r *proxyResource) UpgradeState(context.Context) map[int64]resource.StateUpgrader {
	return map[int64]resource.StateUpgrader{
		0: {StateUpgrader: func(_ context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
			if req.RawState == nil || req.RawState.JSON == nil {
				resp.Diagnostics.AddError("Cannot upgrade the egress_proxy state", "The state of version 0 is not JSON: run `terraform refresh` with the provider version that wrote it, then upgrade.")
				return
			}
			upgraded, err := withTextLogFormat(req.RawState.JSON)
			if err != nil {
				resp.Diagnostics.AddError("Cannot upgrade the egress_proxy state", fmt.Sprintf("Reading the state of version 0: %v.", err))
				return
			}
			resp.DynamicValue = &tfprotov6.DynamicValue{JSON: upgraded}
		}},
	}
}

// withTextLogFormat is a version 0 state's JSON with log_format "text", and every other attribute as it was.
func withTextLogFormat(state []byte) ([]byte, error) {
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(state, &attrs); err != nil {
		return nil, err
	}
	if attrs == nil {
		return nil, fmt.Errorf("the state is not a JSON object")
	}
	attrs["log_format"] = json.RawMessage(`"` + string(proxyconf.LogFormatText) + `"`)
	return json.Marshal(attrs)
}
