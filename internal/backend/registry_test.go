package backend_test

import (
	"context"
	"errors"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// The registry builds each backend once, on first use, and never touches an unconfigured one.
func TestRegistryBuildsLazilyOnce(t *testing.T) {
	t.Parallel()
	builds := map[backend.Kind]int{}
	factory := func(kind backend.Kind, fail *bool) backend.Factory {
		return func(context.Context) (backend.Backend, error) {
			builds[kind]++
			if fail != nil && *fail {
				return nil, errors.New("bad credentials")
			}
			return memory.New(kind), nil
		}
	}
	gcpFails := true
	r := backend.NewRegistry(map[backend.Kind]backend.Factory{
		backend.KindKVM: factory(backend.KindKVM, nil),
		backend.KindGCP: factory(backend.KindGCP, &gcpFails),
	})
	if len(builds) != 0 {
		t.Fatalf("NewRegistry built %v before any use", builds)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := r.Backend(ctx, backend.KindKVM); err != nil {
			t.Fatal(err)
		}
	}
	if builds[backend.KindKVM] != 1 {
		t.Errorf("kvm built %d times, want once", builds[backend.KindKVM])
	}
	if _, err := r.Backend(ctx, backend.KindGCP); err == nil {
		t.Error("a failing factory gave no error")
	}
	gcpFails = false
	if _, err := r.Backend(ctx, backend.KindGCP); err != nil {
		t.Errorf("a failed build was remembered: %v", err)
	}
	_, err := r.Backend(ctx, backend.KindKubernetes)
	var nc *backend.NotConfiguredError
	if !errors.As(err, &nc) || backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("unconfigured kind: err = %v, want a Permanent NotConfiguredError", err)
	}
	if builds[backend.KindKubernetes] != 0 {
		t.Error("an unconfigured backend was built")
	}
}

// The logging decorator passes results and errors through untouched, and keeps the Checker.
func TestLoggingDecoratorIsTransparent(t *testing.T) {
	t.Parallel()
	mem := memory.New(backend.KindKVM)
	b := backend.WithLogging(backend.KindKVM, mem)
	if _, ok := b.(backend.Checker); !ok {
		t.Error("the decorator hid the Checker")
	}
	ctx := context.Background()
	spec := backend.Spec{Name: "egress-1", UID: "u1", Owner: "o", Placement: backend.Placement{Backend: backend.KindKVM, Target: "h"}}
	inst, err := b.Create(ctx, spec)
	if err != nil || inst.ID.String() != "kvm/h/egress-1" {
		t.Fatalf("Create = %v, %v", inst.ID, err)
	}
	if _, err := b.Get(ctx, backend.ProviderID{Backend: backend.KindKVM, Target: "h", Name: "nope"}); !backend.IsNotFound(err) {
		t.Errorf("Get of a missing instance = %v, want NotFound through the decorator", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Error(err)
	}
}
