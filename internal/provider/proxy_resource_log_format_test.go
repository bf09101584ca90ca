package provider

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestAccProxy_logFormat: a new proxy logs JSON without being told, and the backend is given it; log_format
// changes in place both ways, each time with the backend given the new format ("text" as the zero value the
// backends have always kept); a configuration that drops the attribute keeps the current format with an
// empty plan. Every step's apply is followed by the framework's empty-plan check.
func TestAccProxy_logFormat(t *testing.T) {
	mem := newMemoryBackends()
	config := func(logFormat string) string {
		line := ""
		if logFormat != "" {
			line = fmt.Sprintf("log_format = %q", logFormat)
		}
		return proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  %s
`, line))
	}
	action := func(a plancheck.ResourceActionType, want string) tfresource.ConfigPlanChecks {
		return tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction("egress_proxy.test", a),
			plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("log_format"), knownvalue.StringExact(want)),
		}}
	}
	stateIs := func(want string) []statecheck.StateCheck {
		return []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("log_format"), knownvalue.StringExact(want))}
	}
	tfresource.Test(t, tfresource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []tfresource.TestStep{
			{
				Config:            config(""),
				ConfigPlanChecks:  action(plancheck.ResourceActionCreate, "json"),
				ConfigStateChecks: stateIs("json"),
				Check:             checkBackendLogFormat(mem, proxyconf.LogFormatJSON, 0),
			},
			{
				Config:            config("text"),
				ConfigPlanChecks:  action(plancheck.ResourceActionUpdate, "text"),
				ConfigStateChecks: stateIs("text"),
				Check:             checkBackendLogFormat(mem, "", 1),
			},
			{
				Config:            config("json"),
				ConfigPlanChecks:  action(plancheck.ResourceActionUpdate, "json"),
				ConfigStateChecks: stateIs("json"),
				Check:             checkBackendLogFormat(mem, proxyconf.LogFormatJSON, 2),
			},
			{
				Config:            config(""),
				ConfigPlanChecks:  tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				ConfigStateChecks: stateIs("json"),
				Check:             checkBackendLogFormat(mem, proxyconf.LogFormatJSON, 2),
			},
		},
	})
}

// checkBackendLogFormat: the one proxy the kvm memory backend holds logs want, after reconfigures in-place
// changes (none replaced it).
func checkBackendLogFormat(mem memoryBackends, want proxyconf.LogFormat, reconfigures int) tfresource.TestCheckFunc {
	return func(*terraform.State) error {
		held := mem[kvm.Kind].Instances()
		if len(held) != 1 {
			return fmt.Errorf("the backend holds %d proxies, want 1", len(held))
		}
		if p := held[0].Proxy; p == nil || p.LogFormat != want {
			return fmt.Errorf("the backend was given settings %+v, want log format %q", held[0].Proxy, want)
		}
		if n := mem[kvm.Kind].Calls("reconfigure"); n != reconfigures {
			return fmt.Errorf("reconfigure was called %d times, want %d", n, reconfigures)
		}
		if n := mem[kvm.Kind].Calls("create"); n != 1 {
			return fmt.Errorf("create was called %d times, want 1: the format changes in place", n)
		}
		return nil
	}
}

// TestProxyStateUpgradeFromVersion0: a state of version 0 (every proxy before log_format) comes out of the
// upgrader with log_format "text" and every other attribute as it was, and decodes as the current schema's
// type, which is what the framework does with it next. A state that is not a JSON object is refused with a
// diagnostic, never read as an empty proxy.
func TestProxyStateUpgradeFromVersion0(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	upgrader, ok := (&proxyResource{}).UpgradeState(ctx)[0]
	if !ok {
		t.Fatal("no upgrader from version 0")
	}
	if sch := proxyResourceSchema(ctx); sch.Version != 1 {
		t.Fatalf("schema version %d, want 1", sch.Version)
	}
	typ := proxyResourceSchema(ctx).Type().TerraformType(ctx)
	for name, tc := range map[string]struct {
		state   string
		wantErr bool
	}{
		"a kvm proxy": {state: `{"id":"kvm/hv1/egress-a","name":"egress-a","port":3128,"allowed_client_cidrs":["10.0.0.0/8"],` +
			`"allowed_destinations":["api.example.com"],"allowed_ports":[443],"max_connections_per_client":256,"kvm":{"host":"hv1"}}`},
		"an empty object": {state: `{}`},
		"not an object":   {state: `["id"]`, wantErr: true},
		"null":            {state: `null`, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var resp resource.UpgradeStateResponse
			upgrader.StateUpgrader(ctx, resource.UpgradeStateRequest{RawState: &tfprotov6.RawState{JSON: []byte(tc.state)}}, &resp)
			if resp.Diagnostics.HasError() != tc.wantErr {
				t.Fatalf("diagnostics %v, want an error: %v", resp.Diagnostics, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			var before, after map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.state), &before); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(resp.DynamicValue.JSON, &after); err != nil {
				t.Fatal(err)
			}
			if string(after["log_format"]) != `"text"` {
				t.Errorf("log_format is %s, want \"text\"", after["log_format"])
			}
			delete(after, "log_format")
			if a, _ := json.Marshal(after); string(a) != mustCompact(t, before) {
				t.Errorf("the other attributes changed:\n%s\nwant\n%s", a, mustCompact(t, before))
			}
			if _, err := resp.DynamicValue.Unmarshal(typ); err != nil {
				t.Errorf("the upgraded state does not decode as the current schema: %v", err)
			}
		})
	}
}

func mustCompact(t *testing.T, v map[string]json.RawMessage) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
