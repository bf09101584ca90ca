package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// protocolClient drives the provider over tfprotov6 in this process the way Terraform does: the schemas
// first, then ConfigureProvider, then the RPCs under test. It is how list resources and actions are tested
// on the CLIs CI has (OpenTofu 1.12, Terraform 1.11), which have neither.
type protocolClient struct {
	t       *testing.T
	server  tfprotov6.ProviderServer
	schemas *tfprotov6.GetProviderSchemaResponse
	// identities are the resource identity schemas, by resource type.
	identities map[string]*tfprotov6.ResourceIdentitySchema
	// The list and action RPCs are on interfaces of their own until terraform-plugin-go folds them into
	// ProviderServer; they are deprecated only in favour of that move.
	lists   tfprotov6.ProviderServerWithListResource //nolint:staticcheck // see above
	actions tfprotov6.ProviderServerWithActions      //nolint:staticcheck // see above
}

// startProtocol serves p in-process, reads its schemas and configures it with providerJSON (a JSON object of
// the provider block's attributes; those left out are null, as Terraform sends them).
func startProtocol(t *testing.T, p provider.Provider, providerJSON string) *protocolClient {
	t.Helper()
	server, err := providerserver.NewProtocol6WithError(p)()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	schemas, err := server.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	requireNoDiagnostics(t, "GetProviderSchema", schemas.Diagnostics)
	identities, err := server.GetResourceIdentitySchemas(ctx, &tfprotov6.GetResourceIdentitySchemasRequest{})
	if err != nil {
		t.Fatal(err)
	}
	requireNoDiagnostics(t, "GetResourceIdentitySchemas", identities.Diagnostics)
	c := &protocolClient{t: t, server: server, schemas: schemas, identities: identities.IdentitySchemas}
	var ok bool
	if c.lists, ok = server.(tfprotov6.ProviderServerWithListResource); !ok { //nolint:staticcheck // see protocolClient
		t.Fatal("the provider server does not serve list resources")
	}
	if c.actions, ok = server.(tfprotov6.ProviderServerWithActions); !ok { //nolint:staticcheck // see protocolClient
		t.Fatal("the provider server does not serve actions")
	}
	configured, err := server.ConfigureProvider(ctx, &tfprotov6.ConfigureProviderRequest{
		TerraformVersion: "1.14.0", Config: &tfprotov6.DynamicValue{JSON: []byte(providerJSON)},
	})
	if err != nil {
		t.Fatal(err)
	}
	requireNoDiagnostics(t, "ConfigureProvider", configured.Diagnostics)
	return c
}

func requireNoDiagnostics(t *testing.T, rpc string, diags []*tfprotov6.Diagnostic) {
	t.Helper()
	if len(diags) > 0 {
		t.Fatalf("%s: unexpected diagnostics:\n%s", rpc, diagnosticsText(diags))
	}
}

func diagnosticsText(diags []*tfprotov6.Diagnostic) string {
	lines := make([]string, len(diags))
	for i, d := range diags {
		lines[i] = fmt.Sprintf("%s: %s: %s", severityName[d.Severity], d.Summary, d.Detail)
	}
	return strings.Join(lines, "\n")
}

// list runs ListResource and collects every streamed result.
func (c *protocolClient) list(configJSON string, includeResource bool, limit int64) []tfprotov6.ListResourceResult {
	c.t.Helper()
	stream, err := c.lists.ListResource(context.Background(), &tfprotov6.ListResourceRequest{
		TypeName: "egress_proxy", Config: &tfprotov6.DynamicValue{JSON: []byte(configJSON)},
		IncludeResource: includeResource, Limit: limit,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	var results []tfprotov6.ListResourceResult
	for r := range stream.Results {
		results = append(results, r)
	}
	return results
}

func (c *protocolClient) validateList(configJSON string) []*tfprotov6.Diagnostic {
	c.t.Helper()
	resp, err := c.lists.ValidateListResourceConfig(context.Background(),
		&tfprotov6.ValidateListResourceConfigRequest{TypeName: "egress_proxy", Config: &tfprotov6.DynamicValue{JSON: []byte(configJSON)}})
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Diagnostics
}

func (c *protocolClient) validateAction(configJSON string) []*tfprotov6.Diagnostic {
	c.t.Helper()
	resp, err := c.actions.ValidateActionConfig(context.Background(), &tfprotov6.ValidateActionConfigRequest{
		ActionType: "egress_proxy_gc", Config: &tfprotov6.DynamicValue{JSON: []byte(configJSON)},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Diagnostics
}

// invoke plans and invokes the egress_proxy_gc action as `terraform apply -invoke` does, and returns the
// progress messages in order and the diagnostics of the completed event.
func (c *protocolClient) invoke(configJSON string) ([]string, []*tfprotov6.Diagnostic) {
	c.t.Helper()
	return c.invokeWith(context.Background(), configJSON, nil)
}

// invokeWith is invoke with the RPC's context, and onProgress called on each progress message as it arrives,
// while the action waits for it to be taken.
func (c *protocolClient) invokeWith(ctx context.Context, configJSON string, onProgress func(string)) ([]string, []*tfprotov6.Diagnostic) {
	c.t.Helper()
	config := &tfprotov6.DynamicValue{JSON: []byte(configJSON)}
	requireNoDiagnostics(c.t, "ValidateActionConfig", c.validateAction(configJSON))
	planned, err := c.actions.PlanAction(ctx, &tfprotov6.PlanActionRequest{ActionType: "egress_proxy_gc", Config: config})
	if err != nil {
		c.t.Fatal(err)
	}
	requireNoDiagnostics(c.t, "PlanAction", planned.Diagnostics)
	stream, err := c.actions.InvokeAction(ctx, &tfprotov6.InvokeActionRequest{ActionType: "egress_proxy_gc", Config: config})
	if err != nil {
		c.t.Fatal(err)
	}
	var (
		progress  []string
		completed *tfprotov6.CompletedInvokeActionEventType
	)
	for event := range stream.Events {
		switch e := event.Type.(type) {
		case tfprotov6.ProgressInvokeActionEventType:
			if completed != nil {
				c.t.Errorf("progress %q after the completed event", e.Message)
			}
			progress = append(progress, e.Message)
			if onProgress != nil {
				onProgress(e.Message)
			}
		case tfprotov6.CompletedInvokeActionEventType:
			if completed != nil {
				c.t.Error("two completed events")
			}
			completed = &e
		}
	}
	if completed == nil {
		c.t.Fatal("InvokeAction ended without a completed event")
	}
	return progress, completed.Diagnostics
}

// resourceValue decodes an egress_proxy object.
func (c *protocolClient) resourceValue(v *tfprotov6.DynamicValue) tftypes.Value {
	c.t.Helper()
	if v == nil {
		c.t.Fatal("no egress_proxy object")
	}
	val, err := v.Unmarshal(c.schemas.ResourceSchemas["egress_proxy"].ValueType())
	if err != nil {
		c.t.Fatal(err)
	}
	return val
}

// identityID decodes a resource identity and returns its id.
func (c *protocolClient) identityID(identity *tfprotov6.ResourceIdentityData) string {
	c.t.Helper()
	if identity == nil || identity.IdentityData == nil {
		c.t.Fatal("no resource identity")
	}
	val, err := identity.IdentityData.Unmarshal(c.identities["egress_proxy"].ValueType())
	if err != nil {
		c.t.Fatal(err)
	}
	return stringAttr(c.t, val, "id")
}

func stringAttr(t *testing.T, obj tftypes.Value, name string) string {
	t.Helper()
	var attrs map[string]tftypes.Value
	if err := obj.As(&attrs); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := attrs[name].As(&s); err != nil {
		t.Fatalf("attribute %s: %v", name, err)
	}
	return s
}

// read runs ReadResource on a state and its identity, as every plan does first.
func (c *protocolClient) read(state *tfprotov6.DynamicValue, identity *tfprotov6.ResourceIdentityData) *tfprotov6.ReadResourceResponse {
	c.t.Helper()
	resp, err := c.server.ReadResource(context.Background(), &tfprotov6.ReadResourceRequest{
		TypeName: "egress_proxy", CurrentState: state, CurrentIdentity: identity,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	requireNoDiagnostics(c.t, "ReadResource", resp.Diagnostics)
	return resp
}

// importByIdentity runs what an import block with the identity does: ImportResourceState, then Read.
func (c *protocolClient) importByIdentity(identity *tfprotov6.ResourceIdentityData) *tfprotov6.ReadResourceResponse {
	c.t.Helper()
	resp, err := c.server.ImportResourceState(context.Background(), &tfprotov6.ImportResourceStateRequest{
		TypeName: "egress_proxy", Identity: identity,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	requireNoDiagnostics(c.t, "ImportResourceState", resp.Diagnostics)
	if len(resp.ImportedResources) != 1 {
		c.t.Fatalf("import gave %d resources, want 1", len(resp.ImportedResources))
	}
	imported := resp.ImportedResources[0]
	return c.read(imported.State, imported.Identity)
}

// requireRoundTrip proves a listed object is what the resource itself reads: Read of it changes nothing,
// and an import of its identity reads the same object. This is why the configuration `terraform query`
// generates from it, once imported, plans no changes.
func (c *protocolClient) requireRoundTrip(r tfprotov6.ListResourceResult) {
	c.t.Helper()
	listed := c.resourceValue(r.Resource)
	read := c.read(r.Resource, r.Identity)
	if got := c.resourceValue(read.NewState); !got.Equal(listed) {
		c.t.Errorf("Read changed the listed object %s:\n%s", c.identityID(r.Identity), valueDiff(listed, got))
	}
	if id := c.identityID(read.NewIdentity); id != c.identityID(r.Identity) {
		c.t.Errorf("Read changed the identity: %s, listed %s", id, c.identityID(r.Identity))
	}
	imported := c.importByIdentity(r.Identity)
	if got := c.resourceValue(imported.NewState); !got.Equal(listed) {
		c.t.Errorf("importing %s reads another object than the list gave:\n%s", c.identityID(r.Identity), valueDiff(listed, got))
	}
}

func valueDiff(want, got tftypes.Value) string {
	diffs, err := want.Diff(got)
	if err != nil {
		return err.Error()
	}
	lines := make([]string, len(diffs))
	for i, d := range diffs {
		lines[i] = fmt.Sprintf("%s: listed %v, read %v", d.Path, d.Value1, d.Value2)
	}
	return strings.Join(lines, "\n")
}
