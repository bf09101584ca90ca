package kvm

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Check reports every configured host's health: reachable, which libvirt and hypervisor, the pool active
// with space left, the base volume present, the network active. It dials hosts not yet connected, which
// is the point of a health check.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	names := b.Hosts()
	out := make([]backend.Health, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.checkHost(ctx, name)
		}()
	}
	wg.Wait()
	return out
}

func (b *Backend) checkHost(ctx context.Context, name string) backend.Health {
	h := b.hosts[name]
	health := backend.Health{Target: name, Details: map[string]string{"uri": h.URI}}
	err := b.conns[name].do(ctx, func(l api) error {
		lib, err := l.ConnectGetLibVersion()
		if err != nil {
			return err
		}
		health.Details["libvirt_version"] = version(lib)
		typ, err := l.ConnectGetType()
		if err != nil {
			return err
		}
		hv, err := l.ConnectGetVersion()
		if err != nil {
			return err
		}
		health.Details["hypervisor"] = typ + " " + version(hv)

		pool, err := activePool(l, h.Pool)
		if err != nil {
			return fmt.Errorf("pool %s: %w", h.Pool, err)
		}
		health.Details["pool_available_bytes"] = strconv.FormatUint(pool.available, 10)
		if pool.available == 0 {
			return fmt.Errorf("pool %s has no space left", h.Pool)
		}
		if h.BaseVolume != "" {
			if _, err := lookupBase(l, pool.pool, h.BaseVolume); err != nil {
				return fmt.Errorf("base volume %s: %w", h.BaseVolume, err)
			}
		}
		if h.Bridge == "" {
			n, err := lookupNetwork(l, h.Network)
			if err != nil {
				return fmt.Errorf("network %s: %w", h.Network, err)
			}
			active, err := l.NetworkIsActive(n)
			if err != nil {
				return err
			}
			if active == 0 {
				return fmt.Errorf("network %s is not active: start it (virsh net-start %s)", h.Network, h.Network)
			}
		}
		return nil
	})
	if err != nil {
		health.Reason = classify("kvm host "+name, err).Error()
		return health
	}
	health.Healthy = true
	return health
}

// version formats libvirt's packed version number (major*1000000 + minor*1000 + release).
func version(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}
