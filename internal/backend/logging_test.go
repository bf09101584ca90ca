package backend_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-log/tflog"
	"github.com/hashicorp/terraform-plugin-log/tflogtest"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// Every call is logged at DEBUG in the backend's own subsystem with operation, id, duration and class.
func TestLoggingDecoratorRecordsCalls(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	ctx := tflogtest.RootLogger(context.Background(), &out)
	mem := memory.New(kvm.Kind)
	b := backend.WithLogging(kvm.Kind, mem)
	id := backend.ProviderID{Backend: kvm.Kind, Target: "h", Name: "gone"}
	_, _ = b.Get(ctx, id)

	entries, err := tflogtest.MultilineJSONDecode(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("got %d log entries, want 1: %v", len(entries), entries)
	}
	e := entries[0]
	for key, want := range map[string]any{
		"@level": "debug", "@module": "provider.kvm", "operation": "get", "provider_id": "kvm/h/gone", "error_class": "NotFound",
	} {
		if e[key] != want {
			t.Errorf("log field %s = %v, want %v (entry %v)", key, e[key], want, e)
		}
	}
	if _, ok := e["duration_ms"]; !ok {
		t.Errorf("no duration_ms in %v", e)
	}
}

// Wire logs never show credentials, whether they come as fields or inside the logged text.
func TestWireLogsMaskSecrets(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	ctx := backend.Subsystem(tflogtest.RootLogger(context.Background(), &out), gcp.Kind)
	tflog.SubsystemTrace(ctx, string(gcp.Kind), "POST /compute/v1/projects/p/zones/z/instances", map[string]any{
		"password": "hunter2-field",
		"headers":  "Authorization: Bearer ya29.secret-token",
		"body":     `{"name":"x","access_token":"tok-in-body"}`,
	})
	text := out.String()
	for _, secret := range []string{"hunter2-field", "ya29.secret-token", "tok-in-body"} {
		if strings.Contains(text, secret) {
			t.Errorf("wire log shows %q:\n%s", secret, text)
		}
	}
	if !strings.Contains(text, "POST /compute/v1/projects/p/zones/z/instances") || !strings.Contains(text, `"@level":"trace"`) {
		t.Errorf("wire log lost its useful part or level:\n%s", text)
	}
}
