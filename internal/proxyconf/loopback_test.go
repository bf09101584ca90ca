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

// TestLoopbackGuardLiftedOnlyByTests keeps RenderOptions.WithLoopbackDestinationsForTests a test's tool: no
// file of the module but a _test.go file calls it, so no backend can render a proxy that reaches loopback.
func TestLoopbackGuardLiftedOnlyByTests(t *testing.T) {
	t.Parallel()
	const method = "WithLoopbackDestinationsForTests"
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
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == method {
				t.Errorf("%s calls %s: only tests may lift the loopback guard", path, method)
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
