package provider

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

const providerAddress = "registry.terraform.io/egress-proxies/egress"

// serveForCLI serves the provider on mem in this process and returns the TF_REATTACH_PROVIDERS value that
// makes a CLI run use it.
func serveForCLI(t *testing.T, mem memoryBackends) string {
	t.Helper()
	return serveProviderForCLI(t, &egressProvider{version: "test", factories: mem.factories})
}

// serveProviderForCLI is serveForCLI for any provider value, the real one (New) included.
func serveProviderForCLI(t *testing.T, p provider.Provider) string {
	t.Helper()
	return serveProviderServerForCLI(t, providerserver.NewProtocol6(p))
}

// serveProviderServerForCLI is serveProviderForCLI for a provider server, which a test may wrap.
func serveProviderServerForCLI(t *testing.T, factory func() tfprotov6.ProviderServer) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	configCh := make(chan *plugin.ReattachConfig, 1)
	closeCh := make(chan struct{})
	go func() {
		err := tf6server.Serve(providerAddress, func() tfprotov6.ProviderServer { return factory() },
			tf6server.WithDebug(ctx, configCh, closeCh))
		if err != nil {
			t.Errorf("serving the provider: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-closeCh })
	var rc *plugin.ReattachConfig
	select {
	case rc = <-configCh:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider server did not start")
	}
	reattach, err := json.Marshal(map[string]any{providerAddress: map[string]any{
		"Protocol": string(rc.Protocol), "ProtocolVersion": rc.ProtocolVersion, "Pid": rc.Pid, "Test": true,
		"Addr": map[string]string{"Network": rc.Addr.Network(), "String": rc.Addr.String()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return string(reattach)
}

// Ctrl-C during a create that hangs on the backend: the CLI asks the provider to stop, the provider cancels
// its backend call, and the run ends within seconds instead of waiting out the 20-minute create timeout.
func TestAccProxy_interruptStopsPromptly(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	testAccPreCheck(t)
	mem := newMemoryBackends()
	// The backend stores the instance and then waits for it to run, as a real one does: the interrupt lands
	// after something exists, so the provider must record it for a later destroy rather than leak it.
	mem[kvm.Kind].SetFaults(memory.Faults{NeverReady: true})
	reattach := serveForCLI(t, mem)

	dir := t.TempDir()
	config := `terraform {
  required_providers {
    egress = { source = "registry.terraform.io/egress-proxies/egress" }
  }
}
` + proxyConfig(`  kvm = {}
  allowed_client_cidrs = ["10.0.0.0/8"]`)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(dir, "cli.tfrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tofu := os.Getenv("TF_ACC_TERRAFORM_PATH")
	env := append(os.Environ(), "TF_REATTACH_PROVIDERS="+reattach, "TF_CLI_CONFIG_FILE="+cliConfig, "TF_IN_AUTOMATION=1")
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(tofu, args...)
		cmd.Dir, cmd.Env = dir, env
		return cmd
	}
	if out, err := run("init", "-no-color").CombinedOutput(); err != nil {
		t.Fatalf("tofu init: %v\n%s", err, out)
	}

	var out testutil.LockedBuffer
	apply := run("apply", "-auto-approve", "-no-color")
	apply.Stdout, apply.Stderr = &out, &out
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for mem[kvm.Kind].Calls("create") == 0 {
		if time.Now().After(deadline) {
			_ = apply.Process.Kill()
			t.Fatalf("the create never reached the backend:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := apply.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	interrupted := time.Now()
	done := make(chan error, 1)
	go func() { done <- apply.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("an interrupted apply exited 0:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		_ = apply.Process.Kill()
		t.Fatalf("tofu apply still running 30s after Ctrl-C:\n%s", out.String())
	}
	t.Logf("tofu apply ended %v after the interrupt", time.Since(interrupted).Round(time.Millisecond))
	text := out.String()
	for _, want := range []string{"Interrupt received", "Egress proxy operation interrupted", "Could not create egress proxy", "context canceled"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	created := mem[kvm.Kind].Instances()
	if len(created) != 1 {
		t.Fatalf("the backend holds %d instances after the interrupted create, want the 1 it stored", len(created))
	}
	// The state knows the half-made instance (tainted), so a destroy removes it: nothing is leaked.
	state, err := run("show", "-json").Output()
	if err != nil {
		t.Fatalf("show -json: %v", err)
	}
	if !strings.Contains(string(state), `"id":"`+created[0].ID.String()+`"`) {
		t.Fatalf("the state does not record the interrupted create's instance %s:\n%s", created[0].ID, state)
	}
	mem[kvm.Kind].SetFaults(memory.Faults{})
	if out, err := run("destroy", "-auto-approve", "-no-color").CombinedOutput(); err != nil {
		t.Fatalf("destroy after the interrupt: %v\n%s", err, out)
	}
	if n := len(mem[kvm.Kind].Instances()); n != 0 {
		t.Errorf("the destroy after the interrupted create left %d instances behind", n)
	}
}
