package backend_test

import (
	"context"
	"errors"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
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
		kvm.Kind: factory(kvm.Kind, nil),
		gcp.Kind: factory(gcp.Kind, &gcpFails),
	})
	if len(builds) != 0 {
		t.Fatalf("NewRegistry built %v before any use", builds)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := r.Backend(ctx, kvm.Kind); err != nil {
			t.Fatal(err)
		}
	}
	if builds[kvm.Kind] != 1 {
		t.Errorf("kvm built %d times, want once", builds[kvm.Kind])
	}
	if _, err := r.Backend(ctx, gcp.Kind); err == nil {
		t.Error("a failing factory gave no error")
	}
	gcpFails = false
	if _, err := r.Backend(ctx, gcp.Kind); err != nil {
		t.Errorf("a failed build was remembered: %v", err)
	}
	_, err := r.Backend(ctx, kubernetes.Kind)
	var nc *backend.NotConfiguredError
	if !errors.As(err, &nc) || backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("unconfigured kind: err = %v, want a Permanent NotConfiguredError", err)
	}
	if builds[kubernetes.Kind] != 0 {
		t.Error("an unconfigured backend was built")
	}
}

// The logging decorator passes results and errors through untouched, and keeps the Checker.
func TestLoggingDecoratorIsTransparent(t *testing.T) {
	t.Parallel()
	mem := memory.New(kvm.Kind)
	b := backend.WithLogging(kvm.Kind, mem)
	if _, ok := b.(backend.Checker); !ok {
		t.Error("the decorator hid the Checker")
	}
	ctx := context.Background()
	spec := backend.Spec{Name: "egress-1", UID: "u1", Owner: "o", Placement: backend.Placement{Backend: kvm.Kind, Target: "h"}}
	inst, err := b.Create(ctx, spec)
	if err != nil || inst.ID.String() != "kvm/h/egress-1" {
		t.Fatalf("Create = %v, %v", inst.ID, err)
	}
	if _, err := b.Get(ctx, backend.ProviderID{Backend: kvm.Kind, Target: "h", Name: "nope"}); !backend.IsNotFound(err) {
		t.Errorf("Get of a missing instance = %v, want NotFound through the decorator", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Error(err)
	}
}

// keeper is a Successor that records the call, to see it forwarded.
type keeper struct{ called *bool }

func (k keeper) DeleteForReplacement(context.Context, backend.ProviderID) error {
	*k.called = true
	return nil
}

// The decorator has exactly the optional capabilities of the backend it wraps, and forwards each: a caller
// that asserts one on it learns what the backend can do.
func TestLoggingDecoratorForwardsExactlyTheCapabilities(t *testing.T) {
	t.Parallel()
	type backendWith = struct {
		backend.Backend
		backend.Reconfigurer
		backend.Successor
		backend.Checker
	}
	for name, tc := range map[string]struct {
		build                       func(mem *memory.Backend, k keeper) backend.Backend
		reconfigures, keeps, checks bool
	}{
		"none": {build: func(mem *memory.Backend, _ keeper) backend.Backend { return struct{ backend.Backend }{mem} }},
		"reconfigurer": {build: func(mem *memory.Backend, _ keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Reconfigurer
			}{mem, mem}
		}, reconfigures: true},
		"successor": {build: func(mem *memory.Backend, k keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Successor
			}{mem, k}
		}, keeps: true},
		"checker": {build: func(mem *memory.Backend, _ keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Checker
			}{mem, mem}
		}, checks: true},
		"reconfigurer and successor": {build: func(mem *memory.Backend, k keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Reconfigurer
				backend.Successor
			}{mem, mem, k}
		}, reconfigures: true, keeps: true},
		"reconfigurer and checker": {build: func(mem *memory.Backend, _ keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Reconfigurer
				backend.Checker
			}{mem, mem, mem}
		}, reconfigures: true, checks: true},
		"successor and checker": {build: func(mem *memory.Backend, k keeper) backend.Backend {
			return struct {
				backend.Backend
				backend.Successor
				backend.Checker
			}{mem, k, mem}
		}, keeps: true, checks: true},
		"all three": {build: func(mem *memory.Backend, k keeper) backend.Backend {
			return backendWith{mem, mem, k, mem}
		}, reconfigures: true, keeps: true, checks: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem, called := memory.New(kvm.Kind), false
			b := backend.WithLogging(kvm.Kind, tc.build(mem, keeper{&called}))
			ctx, id := context.Background(), backend.ProviderID{Backend: kvm.Kind, Target: "h", Name: "gone"}
			r, reconfigures := b.(backend.Reconfigurer)
			s, keeps := b.(backend.Successor)
			c, checks := b.(backend.Checker)
			if reconfigures != tc.reconfigures || keeps != tc.keeps || checks != tc.checks {
				t.Fatalf("decorator capabilities (Reconfigurer, Successor, Checker) = %t, %t, %t; the backend has %t, %t, %t",
					reconfigures, keeps, checks, tc.reconfigures, tc.keeps, tc.checks)
			}
			if reconfigures {
				if _, err := r.Reconfigure(ctx, id, proxyconf.Settings{}); !backend.IsNotFound(err) {
					t.Errorf("Reconfigure of a missing proxy through the decorator = %v, want the backend's NotFound", err)
				}
			}
			if keeps {
				if err := s.DeleteForReplacement(ctx, id); err != nil || !called {
					t.Errorf("DeleteForReplacement through the decorator = %v, reached the backend: %t", err, called)
				}
			}
			if checks {
				mem.SetHealth([]backend.Health{{Target: "h", Healthy: true}})
				if got := c.Check(ctx); len(got) != 1 || got[0].Target != "h" {
					t.Errorf("Check through the decorator = %v, want the backend's one target", got)
				}
			}
		})
	}
}
