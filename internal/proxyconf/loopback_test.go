package proxyconf

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestHooksOnlyInTests keeps proxyconf's test hooks tests' tools: no file of the module but a _test.go
// file calls RenderOptions.WithLoopbackDestinationsForTests, so no backend can render a proxy that reaches
// loopback, or CheapHashesForTests, so no backend writes passwords hashed at bcrypt's minimum cost.
func TestTestHooksOnlyInTests(t *testing.T) {
	t.Parallel()
	hooks := map[string]string{
		"WithLoopbackDestinationsForTests": "only tests may lift the loopback guard",
		"CheapHashesForTests":              "only tests may lower the bcrypt cost",
	}
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not %s: %v", root, err)
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Other modules (tools/) and test data are not the provider's code.
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		checked++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && hooks[sel.Sel.Name] != "" {
				t.Errorf("%s calls %s: %s", path, sel.Sel.Name, hooks[sel.Sel.Name])
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: the walk is broken", checked)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
