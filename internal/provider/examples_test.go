package provider

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

// TestExamples_nestedKeysAreInTheSchema reads every example under examples/ and checks the keys written inside
// the provider's nested attributes (`kvm = { ... }`, `kubernetes = { clusters = { x = { ... } } }`) against the
// schema the provider serves. `terraform validate` and `tofu validate` cannot: both drop keys a nested attribute
// does not have without a word (hashicorp/terraform#33570), so a misspelt `image_url` in an example would pass
// them and do nothing for the user who copies it.
func TestExamples_nestedKeysAreInTheSchema(t *testing.T) {
	schemas := servedSchemas(t)
	root := filepath.Join("..", "..", "examples")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isConfigFile(path) {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		file, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
		if diags.HasErrors() {
			t.Errorf("%s: %s", path, diags.Error())
			return nil
		}
		for _, block := range blocksOf(t, file) {
			if schema := schemas.of(block); schema != nil {
				checkBodyKeys(t, path, block.Body, schema)
				checked++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every backend's example alone has a provider block and a proxy: far fewer would mean the walk missed them.
	if checked < 10 {
		t.Fatalf("checked %d egress blocks under %s; expected the examples' provider and egress_proxy blocks", checked, root)
	}
}

// TestExamples_nestedKeyCheckFails proves the check above can fail: a misspelt key in a nested attribute is
// reported with its path.
func TestExamples_nestedKeyCheckFails(t *testing.T) {
	schemas := servedSchemas(t)
	src := `resource "egress_proxy" "x" {
  kvm = { imgae_url = "https://example.com/i.qcow2" }
  allowed_client_cidrs = ["10.0.0.0/8"]
}
provider "egress" {
  kubernetes = { clusters = { main = { config_pathh = "~/.kube/config" } } }
}`
	file, diags := hclsyntax.ParseConfig([]byte(src), "typo.tf", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	recorder := &errorRecorder{TB: t}
	for _, block := range blocksOf(t, file) {
		checkBodyKeys(recorder, "typo.tf", block.Body, schemas.of(block))
	}
	want := []string{"kvm.imgae_url", "kubernetes.clusters.main.config_pathh"}
	for _, w := range want {
		if !strings.Contains(strings.Join(recorder.errors, "\n"), w) {
			t.Errorf("no error names %q; errors: %q", w, recorder.errors)
		}
	}
}

func isConfigFile(path string) bool {
	return strings.HasSuffix(path, ".tf") || strings.HasSuffix(path, ".tfquery.hcl")
}

// blocksOf is the top-level blocks of a file parsed by hclsyntax, whose body is always an *hclsyntax.Body.
func blocksOf(t *testing.T, file *hcl.File) hclsyntax.Blocks {
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		t.Fatalf("%T is not a native syntax body", file.Body)
	}
	return body.Blocks
}

type errorRecorder struct {
	testing.TB
	errors []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

type exampleSchemas struct {
	provider  *tfprotov6.SchemaBlock
	resources map[string]*tfprotov6.SchemaBlock
	data      map[string]*tfprotov6.SchemaBlock
}

func servedSchemas(t *testing.T) exampleSchemas {
	t.Helper()
	server, err := providerserver.NewProtocol6WithError(New("test")())()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := server.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	requireNoDiagnostics(t, "GetProviderSchema", resp.Diagnostics)
	s := exampleSchemas{provider: resp.Provider.Block, resources: map[string]*tfprotov6.SchemaBlock{}, data: map[string]*tfprotov6.SchemaBlock{}}
	for name, r := range resp.ResourceSchemas {
		s.resources[name] = r.Block
	}
	for name, d := range resp.DataSourceSchemas {
		s.data[name] = d.Block
	}
	return s
}

// of returns the schema of an egress block of a configuration, or nil for any other block.
func (s exampleSchemas) of(block *hclsyntax.Block) *tfprotov6.SchemaBlock {
	switch {
	case block.Type == "provider" && len(block.Labels) == 1 && block.Labels[0] == "egress":
		return s.provider
	case block.Type == "resource" && len(block.Labels) == 2:
		return s.resources[block.Labels[0]]
	case block.Type == "data" && len(block.Labels) == 2:
		return s.data[block.Labels[0]]
	}
	return nil
}

// checkBodyKeys checks the attributes and nested blocks of body against schema, descending into the object
// constructors written for nested attributes. Expressions other than literal objects (variables, for
// expressions) are the CLIs' to check.
func checkBodyKeys(t testing.TB, path string, body *hclsyntax.Body, schema *tfprotov6.SchemaBlock) {
	attrs := map[string]*tfprotov6.SchemaAttribute{}
	for _, a := range schema.Attributes {
		attrs[a.Name] = a
	}
	names := make([]string, 0, len(body.Attributes))
	for name := range body.Attributes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "count" || name == "for_each" || name == "depends_on" || name == "provider" || name == "alias" {
			continue
		}
		a, ok := attrs[name]
		if !ok {
			t.Errorf("%s: %s is not an attribute of the schema", path, name)
			continue
		}
		checkNestedKeys(t, path, name, body.Attributes[name].Expr, a.NestedType)
	}
}

func checkNestedKeys(t testing.TB, path, at string, expr hclsyntax.Expression, nested *tfprotov6.SchemaObject) {
	obj, ok := expr.(*hclsyntax.ObjectConsExpr)
	if nested == nil || !ok {
		return
	}
	if nested.Nesting == tfprotov6.SchemaObjectNestingModeMap {
		// A map of objects: its keys are the user's names, each value an object of the nested type.
		for _, item := range obj.Items {
			key := keyOf(item.KeyExpr)
			checkObjectKeys(t, path, at+"."+key, item.ValueExpr, nested)
		}
		return
	}
	checkObjectKeys(t, path, at, obj, nested)
}

func checkObjectKeys(t testing.TB, path, at string, expr hclsyntax.Expression, nested *tfprotov6.SchemaObject) {
	obj, ok := expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		return
	}
	attrs := map[string]*tfprotov6.SchemaAttribute{}
	for _, a := range nested.Attributes {
		attrs[a.Name] = a
	}
	for _, item := range obj.Items {
		key := keyOf(item.KeyExpr)
		a, ok := attrs[key]
		if !ok {
			t.Errorf("%s: %s.%s is not an attribute of the schema: the CLIs would drop it without a word", path, at, key)
			continue
		}
		checkNestedKeys(t, path, at+"."+key, item.ValueExpr, a.NestedType)
	}
}

// keyOf is an object constructor item's key as written: a bare name or a quoted string.
func keyOf(expr hclsyntax.Expression) string {
	if k, ok := expr.(*hclsyntax.ObjectConsKeyExpr); ok {
		if name := hcl.ExprAsKeyword(k.Wrapped); name != "" {
			return name
		}
		expr = k.Wrapped
	}
	if tmpl, ok := expr.(*hclsyntax.TemplateExpr); ok && tmpl.IsStringLiteral() {
		v, _ := tmpl.Value(nil)
		return v.AsString()
	}
	return "<expression>"
}
