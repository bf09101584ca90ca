package provider

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The CLI's plan warns on allowed_client_cidrs for every proxy that admits every address without auth, on
// every backend, and for no other: not with auth, not with narrower ranges.
func TestAccProxy_openProxyWarning(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	testAccPreCheck(t)
	cli := os.Getenv("TF_ACC_TERRAFORM_PATH")
	reattach := serveForCLI(t, newMemoryBackends())
	proxies := map[string]struct {
		body     string
		wantWarn bool
	}{
		"kvm_v4_open": {body: `kvm = { host = "hv1" }
  allowed_client_cidrs = ["0.0.0.0/0"]`, wantWarn: true},
		"kubernetes_v6_open": {body: `kubernetes = { cluster = "c1", namespace = "default", service_type = "LoadBalancer" }
  allowed_client_cidrs = ["10.0.0.0/8", "::/0"]`, wantWarn: true},
		"gcp_both_open": {body: `gcp = { project = "proj-1", zone = "europe-west1-b" }
  allowed_client_cidrs = ["0.0.0.0/0", "::/0"]`, wantWarn: true},
		"kubernetes_open_with_auth": {body: `kubernetes = { cluster = "c1", namespace = "default", service_type = "LoadBalancer" }
  allowed_client_cidrs = ["0.0.0.0/0"]
  auth = { username = "u", password = "a-long-password" }`},
		"kvm_open_with_auth": {body: `kvm = { host = "hv1" }
  allowed_client_cidrs = ["0.0.0.0/0", "::/0"]
  auth = { username = "u", password = "a-long-password" }`},
		"gcp_narrow": {body: `gcp = { project = "proj-1", zone = "europe-west1-b" }
  allowed_client_cidrs = ["0.0.0.0/1", "128.0.0.0/1", "2000::/3"]`},
	}
	config := `terraform {
  required_providers {
    egress = { source = "registry.terraform.io/egress-proxies/egress" }
  }
}

provider "egress" {
  owner      = "team-a"
  kubernetes = { clusters = { c1 = { config_path = "/nonexistent/kubeconfig" } } }
  gcp        = {}
  kvm        = { hosts = { hv1 = { uri = "test:///default" } } }
}
`
	var want []string
	for name, p := range proxies {
		config += "\nresource \"egress_proxy\" \"" + name + "\" {\n  " + p.body + "\n}\n"
		if p.wantWarn {
			want = append(want, name)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(dir, "cli.tfrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_REATTACH_PROVIDERS="+reattach, "TF_CLI_CONFIG_FILE="+cliConfig,
		"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_LOG=")
	var out []byte
	for _, args := range [][]string{{"init", "-no-color"}, {"plan", "-json"}} {
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, env
		var err error
		if out, err = cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cli, args[0], err, out)
		}
	}
	// The machine-readable plan: one JSON object a line, each diagnostic with the resource's address and the
	// configuration it points at.
	planned := false
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		var msg struct {
			Type       string            `json:"type"`
			Changes    struct{ Add int } `json:"changes"`
			Diagnostic struct {
				Severity, Summary, Address string
				Snippet                    struct{ Code string } `json:"snippet"`
			} `json:"diagnostic"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil {
			continue
		}
		planned = planned || msg.Type == "change_summary" && msg.Changes.Add == len(proxies)
		d := msg.Diagnostic
		if msg.Type != "diagnostic" || d.Summary != "Proxy open to every address without authentication" {
			continue
		}
		if d.Severity != "warning" || !strings.Contains(d.Snippet.Code, "allowed_client_cidrs =") {
			t.Errorf("%s: a %s on %q, want a warning on allowed_client_cidrs", d.Address, d.Severity, d.Snippet.Code)
		}
		// The CLI validates the configuration more than once during a plan, and shows each warning each time.
		if name := strings.TrimPrefix(d.Address, "egress_proxy."); !slices.Contains(got, name) {
			got = append(got, name)
		}
	}
	if !planned {
		t.Fatalf("the plan does not add the %d proxies:\n%s", len(proxies), out)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the plan warns for %v, want %v:\n%s", got, want, out)
	}
}
