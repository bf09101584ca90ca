package backend

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestContractPullsInNoBackend keeps the contract and the shared policy free of every backend: neither this
// package nor any package under internal/proxyconf imports, directly or through any other package, a package
// under internal/backend/<kind>/, a backend's guest code included. So each backend's packages change without
// the contract, and a fifth backend adds its own without the shared ones naming it. The provider's
// TestSharedCodeNamesNoBackend checks the files of the shared packages for direct imports; this follows every
// import, as go list -deps resolves them.
func TestContractPullsInNoBackend(t *testing.T) {
	t.Parallel()
	const module = "github.com/egress-proxies/terraform-provider-egress"
	shared := []string{module + "/internal/backend", module + "/internal/proxyconf/..."}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Imports"}, shared...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct {
		ImportPath string
		Imports    []string
	}
	var pkgs []pkg
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = p.ImportPath
	}
	for _, want := range []string{module + "/internal/backend", module + "/internal/proxyconf", module + "/internal/proxyconf/vmguest"} {
		if !slices.Contains(paths, want) {
			t.Fatalf("go list -deps does not list %s among %d packages: the scan is broken", want, len(paths))
		}
	}
	for _, p := range pkgs {
		kindPackage, ok := strings.CutPrefix(p.ImportPath, module+"/internal/backend/")
		if !ok {
			continue
		}
		var importers []string
		for _, q := range pkgs {
			if slices.Contains(q.Imports, p.ImportPath) {
				importers = append(importers, q.ImportPath)
			}
		}
		t.Errorf("the contract or the shared policy pulls in internal/backend/%s (imported by %s): what needs it belongs in that "+
			"backend's packages, not in internal/backend or internal/proxyconf", kindPackage, strings.Join(importers, ", "))
	}
}
