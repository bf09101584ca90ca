package kvm

import (
	"context"
	"sync"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// conn is one configured host: the pool of its libvirt connections (dialled on first use, again after a
// loss), and what the backend learned of the host while the provider runs.
type conn struct {
	host HostConfig
	pool *libvirtconn.Pool

	mu sync.Mutex
	// autoType caches what "auto" resolves to on this host: its capabilities do not change while it runs.
	autoType string
	// withoutPasst is set once the daemon refused libvirt's passt backend.
	withoutPasst bool
}

// dialFunc opens a session to one configured host. Tests replace it with an in-memory fake.
type dialFunc func(ctx context.Context, h HostConfig, t target) (*libvirtconn.Session, error)

// newConn is host name's conn, h with its defaults filled in (Config.hosts), which dial connects to.
func newConn(name string, h HostConfig, dial dialFunc) *conn {
	t, _ := parseURI(h.URI) // validated by cfg.hosts
	return &conn{host: h, pool: libvirtconn.NewPool(libvirtconn.Host{
		Name: name, URI: h.URI, DialTimeout: h.DialTimeout,
		Dial:         func(ctx context.Context) (*libvirtconn.Session, error) { return dial(ctx, h, t) },
		Retryable:    retryableDial,
		LogSubsystem: string(Kind),
	})}
}

// do runs fn, which may make several libvirt calls, against the host. It returns when fn does or when ctx
// ends, whichever is first (libvirtconn.Pool.Do).
func (c *conn) do(ctx context.Context, fn func(api) error) error { return c.pool.Do(ctx, fn) }

// close ends the host's connections, if any. The next call dials again.
func (c *conn) close() { c.pool.Close() }

// retryableDial says whether a failed dial is tried again within the host's DialTimeout: unless its class
// says no retry helps (a refused login, a bad key).
func retryableDial(err error) bool {
	cls := classOf(err)
	return cls == backend.ClassTransient || cls == backend.ClassUnclassified
}

// dialLibvirt is the real dialFunc: the transport checked, then dialled.
func dialLibvirt(ctx context.Context, h HostConfig, t target) (*libvirtconn.Session, error) {
	if err := checkTransport(h.URI, t, h.Insecure); err != nil {
		// Before anything is sent: the plan did not see this URI, or was bypassed.
		return nil, &libvirtconn.ConfigError{Err: err}
	}
	return libvirtconn.Dial(ctx, endpoint(h, t))
}

// endpoint is the daemon t names and how h logs in to it. The host's own files come before the URI's
// keyfile, known_hosts and pkipath; no_verify turns off what the insecure settings do.
func endpoint(h HostConfig, t target) libvirtconn.Endpoint {
	return libvirtconn.Endpoint{
		Transport: t.transport, Host: t.host, Port: t.port, User: t.user, Socket: t.socket, Name: t.name,
		SSH: libvirtconn.SSHLogin{
			KeyFile:               firstOf(h.SSHKeyFile, t.query.Get("keyfile")),
			KnownHostsFile:        firstOf(h.SSHKnownHostsFile, t.query.Get("known_hosts")),
			ConfigFile:            h.SSHConfigFile,
			InsecureIgnoreHostKey: h.InsecureIgnoreHostKey || noVerify(t),
		},
		TLS: libvirtconn.TLSLogin{
			PKIPath:    t.query.Get("pkipath"),
			CACertFile: h.TLSCACertFile, ClientCertFile: h.TLSClientCertFile, ClientKeyFile: h.TLSClientKeyFile,
			InsecureSkipVerify: h.InsecureSkipVerify || noVerify(t),
		},
	}
}
