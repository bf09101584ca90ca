package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestMerge reads the document the way tfplugindocs does afterwards: only the keys it looks up matter.
func TestMerge(t *testing.T) {
	t.Parallel()
	sections, err := providerSchemas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
		// check looks at provider "egress" of the output.
		check func(t *testing.T, p map[string]json.RawMessage)
	}{
		{
			name: "adds both sections and keeps the rest",
			in:   `{"format_version":"1.0","provider_schemas":{"egress":{"resource_schemas":{"egress_proxy":{"version":1}}}}}`,
			check: func(t *testing.T, p map[string]json.RawMessage) {
				if got := string(p["resource_schemas"]); got != `{"egress_proxy":{"version":1}}` {
					t.Errorf("resource_schemas = %s, want the input's", got)
				}
				var lists map[string]jsonSchema
				mustUnmarshal(t, p["list_resource_schemas"], &lists)
				attr := lists["egress_proxy"].Block.Attributes["known_ids"]
				if attr == nil || string(attr.Type) != `["list","string"]` || !attr.Optional {
					t.Errorf("list resource egress_proxy known_ids = %+v, want an optional list of strings", attr)
				}
				var actions map[string]jsonActionSchema
				mustUnmarshal(t, p["action_schemas"], &actions)
				gc, ok := actions["egress_proxy_gc"]
				if !ok || gc.Block == nil {
					t.Fatalf("action_schemas = %s, want egress_proxy_gc", p["action_schemas"])
				}
				if attr := gc.Block.Attributes["max_deletions"]; attr == nil || string(attr.Type) != `"number"` {
					t.Errorf("action egress_proxy_gc max_deletions = %+v, want a number", attr)
				}
				if gc.Block.DescriptionKind != "markdown" || gc.Block.Description == "" {
					t.Errorf("action description (%s) %q, want a markdown description", gc.Block.DescriptionKind, gc.Block.Description)
				}
			},
		},
		{
			name: "keeps a section the CLI reports",
			in:   `{"provider_schemas":{"egress":{"action_schemas":{"from_cli":{}}}}}`,
			check: func(t *testing.T, p map[string]json.RawMessage) {
				if got := string(p["action_schemas"]); got != `{"from_cli":{}}` {
					t.Errorf("action_schemas = %s, want the CLI's", got)
				}
				if _, ok := p["list_resource_schemas"]; !ok {
					t.Error("list_resource_schemas missing")
				}
			},
		},
		{
			name:    "provider not renamed",
			in:      `{"provider_schemas":{"registry.terraform.io/egress-proxies/egress":{}}}`,
			wantErr: `provider_schemas has no "egress"`,
		},
		{
			name:    "not JSON",
			in:      `Error: no configuration`,
			wantErr: "reading the schema document",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := merge(strings.NewReader(tt.in), &out, "egress", sections)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("merge error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Providers map[string]map[string]json.RawMessage `json:"provider_schemas"`
			}
			mustUnmarshal(t, out.Bytes(), &doc)
			tt.check(t, doc.Providers["egress"])
		})
	}
}

func mustUnmarshal(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
}
