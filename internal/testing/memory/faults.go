package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Faults are the switches tests flip to make the backend misbehave.
type Faults struct {
	// Errors makes an operation ("create", "get", "update", "delete", "list") fail with the given error.
	Errors map[string]error
	// Delay makes every operation wait this long (or until ctx ends) before it runs.
	Delay time.Duration
	// NeverReady makes Create store the instance and then wait until ctx ends without it becoming ready.
	NeverReady bool
	// ListFailures makes ListByTag fail for these targets while listing the others.
	ListFailures map[string]error
	// NotReconfigurable makes instances report that their rules cannot change in place, as a KVM guest
	// without an answering agent does, and Reconfigure refuse.
	NotReconfigurable bool
	// ListWithoutSettings makes ListByTag leave out each proxy's settings, as backends whose listing reads
	// only the main object do (kubernetes reads no ConfigMap for a list); Get still reports them.
	ListWithoutSettings bool
}

// SetTargets makes Create refuse, as Permanent, a placement on any target but these. Without it, every target
// is accepted.
func (b *Backend) SetTargets(targets ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.targets = targets
}

// SetFaults replaces the current faults.
func (b *Backend) SetFaults(f Faults) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = f
}

// ClassError builds an error of class c about object, as a real backend would report it.
func ClassError(c backend.Class, object, msg string) error {
	return backend.NewError(c, object, fmt.Errorf("%s", msg))
}

// enter counts the call, waits out the configured delay and returns the injected error, if any.
func (b *Backend) enter(ctx context.Context, op, id string) error {
	b.mu.Lock()
	b.calls[op]++
	f := b.faults
	b.mu.Unlock()
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s interrupted: %w", op, id, ctx.Err())
		case <-t.C:
		}
	}
	if err := f.Errors[op]; err != nil {
		return err
	}
	return ctx.Err()
}

// Calls returns how many times op was called.
func (b *Backend) Calls(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// Instances returns a snapshot of every stored instance.
func (b *Backend) Instances() []backend.Instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backend.Instance, 0, len(b.instances))
	for _, inst := range b.instances {
		out = append(out, copyInstance(inst))
	}
	return out
}

// Put stores inst as if it had been created elsewhere (an orphan, or a crashed create).
func (b *Backend) Put(inst backend.Instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.instances[inst.ID.String()] = copyInstance(inst)
}

// Remove deletes an instance behind the provider's back, to simulate drift.
func (b *Backend) Remove(id backend.ProviderID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.instances, id.String())
}
