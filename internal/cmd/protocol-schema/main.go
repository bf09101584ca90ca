// Command protocol-schema adds the provider's list resource and action schemas to a providers-schema JSON
// document (the output of `tofu providers schema -json`, with the provider keyed by its bare name).
//
// OpenTofu 1.12 has neither list resources nor actions, so its document leaves both out and tfplugindocs would
// render no page for them. This program serves the provider in this process, asks it for its schemas over
// protocol 6 (as a CLI would), and writes the two sections in the shape the CLIs' JSON uses. Sections the
// input already has are kept as they are: a CLI that reports them is the better source.
//
//	go run ./internal/cmd/protocol-schema -provider egress < schema.json > merged.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/egress-proxies/terraform-provider-egress/internal/provider"
)

func main() {
	name := flag.String("provider", "egress", "key of the provider in the document's provider_schemas")
	flag.Parse()
	schemas, err := providerSchemas(context.Background())
	if err == nil {
		err = merge(os.Stdin, os.Stdout, *name, schemas)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "protocol-schema:", err)
		os.Exit(1)
	}
}

// providerSchemas returns the list resource and action sections, by their JSON keys.
func providerSchemas(ctx context.Context) (map[string]any, error) {
	server, err := providerserver.NewProtocol6WithError(provider.New("docs")())()
	if err != nil {
		return nil, err
	}
	resp, err := server.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range resp.Diagnostics {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			errs = append(errs, fmt.Errorf("GetProviderSchema: %s: %s", d.Summary, d.Detail))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	lists := map[string]jsonSchema{}
	for name, s := range resp.ListResourceSchemas {
		block, err := convertBlock(s.Block)
		if err != nil {
			return nil, fmt.Errorf("list resource %s: %w", name, err)
		}
		lists[name] = jsonSchema{Version: s.Version, Block: block}
	}
	actions := map[string]jsonActionSchema{}
	for name, s := range resp.ActionSchemas {
		if s.Schema == nil {
			return nil, fmt.Errorf("action %s has no schema", name)
		}
		block, err := convertBlock(s.Schema.Block)
		if err != nil {
			return nil, fmt.Errorf("action %s: %w", name, err)
		}
		actions[name] = jsonActionSchema{Block: block}
	}
	return map[string]any{"list_resource_schemas": lists, "action_schemas": actions}, nil
}

// merge copies the document from in to out, with the sections added to provider name's schema where it lacks them.
func merge(in io.Reader, out io.Writer, name string, sections map[string]any) error {
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(in).Decode(&doc); err != nil {
		return fmt.Errorf("reading the schema document: %w", err)
	}
	var providers map[string]map[string]json.RawMessage
	if raw, ok := doc["provider_schemas"]; ok {
		if err := json.Unmarshal(raw, &providers); err != nil {
			return fmt.Errorf("reading provider_schemas: %w", err)
		}
	}
	p, ok := providers[name]
	if !ok {
		keys := make([]string, 0, len(providers))
		for k := range providers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("provider_schemas has no %q (it has %q): rename the provider's key first", name, keys)
	}
	for key, section := range sections {
		if _, given := p[key]; given {
			continue
		}
		raw, err := json.Marshal(section)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		p[key] = raw
	}
	raw, err := json.Marshal(providers)
	if err != nil {
		return err
	}
	doc["provider_schemas"] = raw
	return json.NewEncoder(out).Encode(doc)
}

// The types below follow the JSON the CLIs write for `providers schema -json`, which tfplugindocs reads.

type jsonSchema struct {
	Version int64      `json:"version"`
	Block   *jsonBlock `json:"block,omitempty"`
}

type jsonActionSchema struct {
	Block *jsonBlock `json:"block,omitempty"`
}

type jsonBlock struct {
	Attributes      map[string]*jsonAttribute   `json:"attributes,omitempty"`
	BlockTypes      map[string]*jsonNestedBlock `json:"block_types,omitempty"`
	Description     string                      `json:"description,omitempty"`
	DescriptionKind string                      `json:"description_kind,omitempty"`
	Deprecated      bool                        `json:"deprecated,omitempty"`
}

type jsonAttribute struct {
	// Type is the attribute's type in the JSON form of cty types, which tftypes writes too.
	Type            json.RawMessage   `json:"type,omitempty"`
	NestedType      *jsonNestedObject `json:"nested_type,omitempty"`
	Description     string            `json:"description,omitempty"`
	DescriptionKind string            `json:"description_kind,omitempty"`
	Deprecated      bool              `json:"deprecated,omitempty"`
	Required        bool              `json:"required,omitempty"`
	Optional        bool              `json:"optional,omitempty"`
	Computed        bool              `json:"computed,omitempty"`
	Sensitive       bool              `json:"sensitive,omitempty"`
	WriteOnly       bool              `json:"write_only,omitempty"`
}

type jsonNestedObject struct {
	Attributes  map[string]*jsonAttribute `json:"attributes"`
	NestingMode string                    `json:"nesting_mode"`
}

type jsonNestedBlock struct {
	Block       *jsonBlock `json:"block"`
	NestingMode string     `json:"nesting_mode"`
	MinItems    int64      `json:"min_items,omitempty"`
	MaxItems    int64      `json:"max_items,omitempty"`
}

func convertBlock(b *tfprotov6.SchemaBlock) (*jsonBlock, error) {
	if b == nil {
		return nil, nil
	}
	attrs, err := convertAttributes(b.Attributes)
	if err != nil {
		return nil, err
	}
	out := &jsonBlock{
		Description:     b.Description,
		DescriptionKind: descriptionKind(b.DescriptionKind),
		Deprecated:      b.Deprecated,
		Attributes:      attrs,
	}
	if len(b.BlockTypes) > 0 {
		out.BlockTypes = map[string]*jsonNestedBlock{}
		for _, nb := range b.BlockTypes {
			block, err := convertBlock(nb.Block)
			if err != nil {
				return nil, fmt.Errorf("block %s: %w", nb.TypeName, err)
			}
			out.BlockTypes[nb.TypeName] = &jsonNestedBlock{
				Block:       block,
				NestingMode: blockNesting[nb.Nesting],
				MinItems:    nb.MinItems,
				MaxItems:    nb.MaxItems,
			}
		}
	}
	return out, nil
}

func convertAttributes(attrs []*tfprotov6.SchemaAttribute) (map[string]*jsonAttribute, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]*jsonAttribute, len(attrs))
	for _, a := range attrs {
		j := &jsonAttribute{
			Description:     a.Description,
			DescriptionKind: descriptionKind(a.DescriptionKind),
			Deprecated:      a.Deprecated,
			Required:        a.Required,
			Optional:        a.Optional,
			Computed:        a.Computed,
			Sensitive:       a.Sensitive,
			WriteOnly:       a.WriteOnly,
		}
		switch {
		case a.NestedType != nil:
			nested, err := convertAttributes(a.NestedType.Attributes)
			if err != nil {
				return nil, fmt.Errorf("attribute %s: %w", a.Name, err)
			}
			j.NestedType = &jsonNestedObject{Attributes: nested, NestingMode: objectNesting[a.NestedType.Nesting]}
		case a.Type != nil:
			// MarshalJSON is marked as not meant for callers outside terraform-plugin-go, but it writes exactly
			// the type signature the CLIs put in this document, and nothing public does that otherwise.
			raw, err := a.Type.MarshalJSON() //nolint:staticcheck // see above
			if err != nil {
				return nil, fmt.Errorf("attribute %s: type %s: %w", a.Name, a.Type, err)
			}
			j.Type = raw
		}
		out[a.Name] = j
	}
	return out, nil
}

func descriptionKind(k tfprotov6.StringKind) string {
	if k == tfprotov6.StringKindMarkdown {
		return "markdown"
	}
	return "plain"
}

var blockNesting = map[tfprotov6.SchemaNestedBlockNestingMode]string{
	tfprotov6.SchemaNestedBlockNestingModeSingle: "single",
	tfprotov6.SchemaNestedBlockNestingModeList:   "list",
	tfprotov6.SchemaNestedBlockNestingModeSet:    "set",
	tfprotov6.SchemaNestedBlockNestingModeMap:    "map",
	tfprotov6.SchemaNestedBlockNestingModeGroup:  "single",
}

var objectNesting = map[tfprotov6.SchemaObjectNestingMode]string{
	tfprotov6.SchemaObjectNestingModeSingle: "single",
	tfprotov6.SchemaObjectNestingModeList:   "list",
	tfprotov6.SchemaObjectNestingModeSet:    "set",
	tfprotov6.SchemaObjectNestingModeMap:    "map",
}
