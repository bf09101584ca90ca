package memory

import (
	"context"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

var _ backend.Checker = (*Backend)(nil)

// SetHealth sets what Check reports; by default one healthy target named "memory".
func (b *Backend) SetHealth(h []backend.Health) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.health = h
}

func (b *Backend) Check(context.Context) []backend.Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.health == nil {
		return []backend.Health{{Target: "memory", Healthy: true, Reason: backend.HealthHealthy, Details: map[string]string{}}}
	}
	return append([]backend.Health(nil), b.health...)
}
