package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Factory builds a configured backend. It must not dial anything: clients connect on first use.
type Factory func(ctx context.Context) (Backend, error)

// Registry holds the backends one provider configuration set up, and builds each on first use, so that a
// configuration that only uses kvm never touches the Kubernetes or GCP clients.
type Registry struct {
	mu        sync.Mutex
	factories map[Kind]Factory
	built     map[Kind]Backend
}

// NewRegistry returns a registry for the configured backends; kinds missing from factories are not configured.
func NewRegistry(factories map[Kind]Factory) *Registry {
	return &Registry{factories: factories, built: map[Kind]Backend{}}
}

// NotConfiguredError says a resource asked for a backend the provider block does not configure.
type NotConfiguredError struct{ Kind Kind }

func (e *NotConfiguredError) Error() string {
	return fmt.Sprintf("the %s backend is not configured on this provider: add a %s = { ... } attribute to the provider block", e.Kind, e.Kind)
}

// Backend returns the backend of kind, building it on first use and wrapping it in the logging decorator.
// A failed build is not remembered, so a later call can succeed once the cause is fixed.
func (r *Registry) Backend(ctx context.Context, kind Kind) (Backend, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.built[kind]; ok {
		return b, nil
	}
	factory, ok := r.factories[kind]
	if !ok {
		return nil, NewError(ClassPermanent, string(kind)+" backend", &NotConfiguredError{Kind: kind})
	}
	b, err := factory(ctx)
	if err != nil {
		return nil, fmt.Errorf("configuring the %s backend: %w", kind, err)
	}
	b = WithLogging(kind, b)
	r.built[kind] = b
	return b, nil
}

// Configured lists the configured kinds in a stable order.
func (r *Registry) Configured() []Kind {
	kinds := make([]Kind, 0, len(r.factories))
	for k := range r.factories {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	return kinds
}
