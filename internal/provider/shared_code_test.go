package provider

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/egress-proxies/terraform-provider-egress"

// TestSharedCodeNamesNoBackend keeps each backend's Terraform-layer code in the files named for it: a file of
// internal/provider (its validators included) that imports a backend's package must be named for that
// backend (backend_<kind>.go, or *_<kind>.go), and the contract (internal/backend) and the shared policy
// (internal/proxyconf) import none. So a fifth backend touches its own files and the registration line, and
// shared code cannot grow a case for one backend. Tests are left out: several run one scenario on every
// backend.
func TestSharedCodeNamesNoBackend(t *testing.T) {
	t.Parallel()
	kinds := backendPackages(t)
	if len(kinds) < 4 {
		t.Fatalf("found backend packages %v: the scan is broken", kinds)
	}
	checked := 0
	for _, dir := range []string{".", "attribute_validator", "../backend", "../proxyconf"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			checked++
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				kind, ok := strings.CutPrefix(path, modulePath+"/internal/backend/")
				if !ok || !kinds[kind] {
					continue
				}
				if dir == "." && namedFor(filepath.Base(file), kind) {
					continue
				}
				t.Errorf("%s imports the %s backend but is shared code: move what needs it into the %s backend's own files "+
					"(internal/provider/backend_%s.go or *_%s.go)", filepath.Join("internal/provider", file), kind, kind, kind, kind)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file checked: the scan is broken")
	}
}

// backendPackages are the backend packages: the folders of internal/backend that hold a backend.go.
func backendPackages(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir("../backend")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("../backend", e.Name(), "backend.go")); e.IsDir() && err == nil {
			kinds[e.Name()] = true
		}
	}
	return kinds
}

// namedFor says whether a file name is one of a backend's: backend_<kind>.go or *_<kind>.go.
func namedFor(name, kind string) bool {
	return regexp.MustCompile(`(^|_)` + regexp.QuoteMeta(kind) + `\.go$`).MatchString(name)
}
