package memory

import (
	"context"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Reconfigure replaces the stored proxy settings, as a real backend makes its running proxy enforce them.
// The listening port is fixed at creation.
func (b *Backend) Reconfigure(ctx context.Context, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	return b.change(ctx, "reconfigure", id, func(inst *backend.Instance) error {
		if b.faults.NotReconfigurable {
			return backend.Permanent(b.object(id), "this instance cannot be reconfigured in place")
		}
		if settings.Port != inst.Port {
			return backend.Permanent(b.object(id), "the listening port %d cannot change in place (asked for %d)", inst.Port, settings.Port)
		}
		inst.Proxy = storedSettings(settings)
		return nil
	})
}

// readBack is the instance as Get reports it. Call with b.mu held.
func (b *Backend) readBack(inst backend.Instance) backend.Instance {
	out := copyInstance(inst)
	out.Reconfigurable = !b.faults.NotReconfigurable
	return out
}
