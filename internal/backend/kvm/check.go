package kvm

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// Check reports every configured host's health: reachable, which libvirt and hypervisor, the pool active
// with space left, the base volume present, the network active. It dials hosts not yet connected, which
// is the point of a health check.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	return backend.EachTarget(ctx, b.Hosts(), b.checkHost)
}

// unhealthy is a failed check step and the reason it gives the host.
type unhealthy struct {
	reason string
	err    error
}

func (u *unhealthy) Error() string { return u.err.Error() }
func (u *unhealthy) Unwrap() error { return u.err }

// as tags err, if any, with the reason a failure of that step gives.
func as(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &unhealthy{reason: reason, err: err}
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
		switch {
		case isCode(err, libvirt.ErrNoStoragePool):
			return as(backend.HealthNotFound, err)
		case backend.ClassOf(err) == backend.ClassPermanent:
			return as(backend.HealthDegraded, err) // there, but not started
		case err != nil:
			return err
		}
		health.Details["pool_available_bytes"] = strconv.FormatUint(pool.available, 10)
		if pool.available == 0 {
			return as(backend.HealthDegraded, fmt.Errorf("pool %s has no space left", h.Pool))
		}
		if h.BaseVolume != "" {
			if _, err := lookupBase(l, pool.pool, h.BaseVolume); isCode(err, libvirt.ErrNoStorageVol) {
				return as(backend.HealthNotFound, err)
			} else if err != nil {
				return fmt.Errorf("base volume %s: %w", h.BaseVolume, err)
			}
		}
		if h.Bridge == "" {
			n, err := lookupNetwork(l, h.Network)
			if isCode(err, libvirt.ErrNoNetwork) {
				return as(backend.HealthNotFound, err)
			} else if err != nil {
				return fmt.Errorf("network %s: %w", h.Network, err)
			}
			active, err := l.NetworkIsActive(n)
			if err != nil {
				return err
			}
			if active == 0 {
				return as(backend.HealthDegraded, fmt.Errorf("network %s is not active: start it (virsh net-start %s)", h.Network, h.Network))
			}
		}
		return nil
	})
	if err != nil {
		health.Reason = healthReason(err)
		health.Details[backend.DetailMessage] = classify("kvm host "+name, err).Error()
		return health
	}
	health.Healthy = true
	health.Reason = backend.HealthHealthy
	return health
}

// healthReason names what a failed check found: the step's own reason, else what the error says of the
// connection and the login.
func healthReason(err error) string {
	var u *unhealthy
	var unreachable *libvirtconn.UnreachableError
	var ce *libvirtconn.ConfigError
	switch {
	case errors.As(err, &u):
		return u.reason
	case errors.As(err, &unreachable):
		return backend.HealthUnreachable
	case isCode(err, libvirt.ErrAuthFailed), isCode(err, libvirt.ErrAuthCancelled), isCode(err, libvirt.ErrAuthUnavailable),
		isCode(err, libvirt.ErrAccessDenied), isCode(err, libvirt.ErrOperationDenied), errors.As(err, &ce):
		// A ConfigError is a login that cannot work as configured: a key missing or refused, a host key
		// that does not match, a certificate that cannot be read.
		return backend.HealthUnauthorized
	case isTransportError(err):
		return backend.HealthUnreachable
	}
	return backend.HealthError
}

// version formats libvirt's packed version number (major*1000000 + minor*1000 + release).
func version(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}
