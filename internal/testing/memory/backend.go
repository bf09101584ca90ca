// Package memory is an in-memory Backend for tests of the Terraform layer. It follows the contract's rules
// (idempotent Create by name, NotFound only when gone, idempotent Delete, partial ListByTag) and has switches
// to inject every error class, slow operations and instances that never become ready. Never offered to users.
package memory

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Backend stores instances per scope ("<target>" or "<target>/<scope>") in memory. Safe for concurrent use.
type Backend struct {
	kind backend.Kind

	mu        sync.Mutex
	instances map[string]backend.Instance // by ProviderID string
	faults    Faults
	// targets, when set, are the only targets Create places proxies on, as a real backend knows only the
	// targets its provider block configures.
	targets []string
	health  []backend.Health
	calls   map[string]int
	now     func() time.Time
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Reconfigurer = (*Backend)(nil)
)

// New returns an empty backend that answers for kind, so ProviderIDs look like the real backend's.
func New(kind backend.Kind) *Backend {
	return &Backend{kind: kind, instances: map[string]backend.Instance{}, calls: map[string]int{}, now: time.Now}
}

func (b *Backend) idFor(p backend.Placement, name string) backend.ProviderID {
	return backend.ProviderID{Backend: b.kind, Target: p.Target, Scope: p.Scope, Name: name}
}

func (b *Backend) object(id backend.ProviderID) string {
	return fmt.Sprintf("%s instance %s", b.kind, id)
}

// Create follows the contract: the name is looked up first, an instance carrying spec.UID is adopted, one
// carrying another UID is refused.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Instance, error) {
	id := b.idFor(spec.Placement, spec.Name)
	if err := b.enter(ctx, "create", id.String()); err != nil {
		return backend.Instance{}, err
	}
	b.mu.Lock()
	if b.targets != nil && !slices.Contains(b.targets, spec.Placement.Target) {
		b.mu.Unlock()
		return backend.Instance{}, backend.Permanent(b.object(id), "target %q is not configured (configured: %v)", spec.Placement.Target, b.targets)
	}
	existing, found := b.instances[id.String()]
	if found {
		// As the real backends: adopted only with both the owner and the UID of the spec.
		if err := backend.OwnershipOfSpec(spec).Check(b.object(id), existing.Owner, existing.UID); err != nil {
			b.mu.Unlock()
			return backend.Instance{}, err
		}
	}
	if !found {
		existing = backend.Instance{
			ID: id, Name: spec.Name, UID: spec.UID, Owner: spec.Owner, Labels: copyLabels(spec.Labels),
			State: backend.StatePending, Port: spec.Proxy.Port, CreatedAt: b.now().UTC().Truncate(time.Second),
			// Three different addresses, so that a provider test tells the attributes apart.
			InternalAddress: "10.0.0.10", EgressAddress: "203.0.113.10", IngressAddress: "198.51.100.10",
			Placement: spec.Placement, Proxy: storedSettings(spec.Proxy),
		}
		b.instances[id.String()] = existing
	}
	neverReady := b.faults.NeverReady
	b.mu.Unlock()

	if neverReady {
		// The object exists: the caller must get its ID with the error so it can be recorded, not leaked.
		<-ctx.Done()
		return existing, fmt.Errorf("waiting for %s to run: %w", b.object(id), ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[id.String()]
	if !ok {
		return backend.Instance{}, backend.Transient(b.object(id), "deleted while it was being created")
	}
	inst.State = backend.StateRunning
	b.instances[id.String()] = inst
	return b.readBack(inst), nil
}

func (b *Backend) Get(ctx context.Context, id backend.ProviderID) (backend.Instance, error) {
	if err := b.enter(ctx, "get", id.String()); err != nil {
		return backend.Instance{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[id.String()]
	if !ok {
		return backend.Instance{}, backend.NotFound(b.object(id), "no such instance")
	}
	if err := backend.OwnershipOf(ctx).Check(b.object(id), inst.Owner, inst.UID); err != nil {
		return backend.Instance{}, err
	}
	return b.readBack(inst), nil
}

func (b *Backend) Update(ctx context.Context, id backend.ProviderID, spec backend.Spec) (backend.Instance, error) {
	return b.change(ctx, "update", id, func(inst *backend.Instance) error {
		inst.Labels = copyLabels(spec.Labels)
		return nil
	})
}

// change applies edit to the stored instance under the lock and stores it, unless edit refuses: the one path
// of Update and Reconfigure, from the injected fault to the instance read back.
func (b *Backend) change(ctx context.Context, op string, id backend.ProviderID, edit func(*backend.Instance) error) (backend.Instance, error) {
	if err := b.enter(ctx, op, id.String()); err != nil {
		return backend.Instance{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[id.String()]
	if !ok {
		return backend.Instance{}, backend.NotFound(b.object(id), "no such instance")
	}
	if err := backend.OwnershipOf(ctx).Check(b.object(id), inst.Owner, inst.UID); err != nil {
		return backend.Instance{}, err
	}
	if err := edit(&inst); err != nil {
		return backend.Instance{}, err
	}
	b.instances[id.String()] = inst
	return b.readBack(inst), nil
}

// Delete waits out the configured delay like a real backend waiting for the object to be gone.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	if err := b.enter(ctx, "delete", id.String()); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if inst, ok := b.instances[id.String()]; ok {
		if err := backend.OwnershipOf(ctx).Check(b.object(id), inst.Owner, inst.UID); err != nil {
			return err
		}
	}
	delete(b.instances, id.String())
	return nil
}

// ListByTag reports each target ("scope" here) whose ListFailure is set as failed, and lists the rest.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	if err := b.enter(ctx, "list", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		out    []backend.Instance
		failed []backend.ScopeError
		seen   = map[string]bool{}
	)
	for _, inst := range b.instances {
		target := inst.ID.Target
		if err, bad := b.faults.ListFailures[target]; bad {
			if !seen[target] {
				seen[target] = true
				failed = append(failed, backend.ScopeError{Backend: b.kind, Scope: target, Err: err})
			}
			continue
		}
		if inst.Owner == sel.Owner {
			listed := copyInstance(inst)
			if b.faults.ListWithoutSettings {
				listed.Proxy = nil
			}
			out = append(out, listed)
		}
	}
	for target, err := range b.faults.ListFailures {
		if !seen[target] {
			failed = append(failed, backend.ScopeError{Backend: b.kind, Scope: target, Err: err})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	sort.Slice(failed, func(i, j int) bool { return failed[i].Scope < failed[j].Scope })
	return out, backend.ListErrorOf(failed)
}

func copyLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func copyInstance(in backend.Instance) backend.Instance {
	in.Labels = copyLabels(in.Labels)
	if in.Proxy != nil {
		p := storedSettings(*in.Proxy)
		in.Proxy = p
	}
	if o := reflect.ValueOf(in.Placement.Options); o.Kind() == reflect.Pointer && !o.IsNil() {
		// A copy of the backend's options, whatever their type, so that a caller's change is not stored.
		c := reflect.New(o.Elem().Type())
		c.Elem().Set(o.Elem())
		in.Placement.Options = c.Interface()
	}
	return in
}

// storedSettings is what a real backend can read back: everything but the password.
func storedSettings(s proxyconf.Settings) *proxyconf.Settings {
	out := s
	out.AllowedClientCIDRs = append([]string(nil), s.AllowedClientCIDRs...)
	out.AllowedDestinations = append([]string(nil), s.AllowedDestinations...)
	out.AllowedPorts = append([]int(nil), s.AllowedPorts...)
	out.Users = proxyconf.UsernamesOnly(s.Users)
	return &out
}
