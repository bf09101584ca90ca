package kvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Readiness that means "the proxy answers". The provider checks from where it runs, which need not be
// where the proxy's clients are: a remote host's libvirt network, or a daemon in another network
// namespace, is not reachable from here. So the first thing a check learns is whether the address is
// reachable at all. A refused connection (the guest's kernel answered) or an accepted one means it is; no
// route, a firewall's refusal or silence until unreachableAfter means it is not, and then Create stops
// waiting for the proxy, succeeds, and says in the instance's Notes what it did wait for. Once an address
// proved reachable, Create waits for the proxy until its ctx ends.
//
// On a libvirt network or bridge the proxy answers when its port accepts a connection and its health
// endpoint (proxyconf.DefaultHealthPort, proxyconf.HealthPath) returns 200. With user-mode networking only
// the proxy port is forwarded: passt accepts on the host address as soon as the domain runs and closes
// the connection while nothing listens in the guest, so the check is any HTTP answer on the forwarded port
// (Squid answers a request without a proxy URL with an error page). A refused connection there means the
// forwarded port is not on this machine (or not in this network namespace): unreachable.
type readiness struct {
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	healthPort int
	// unreachableAfter is how long an address may stay unreachable before the check gives up on it.
	unreachableAfter time.Duration
	// attemptTimeout bounds one probe: connect and the HTTP exchange.
	attemptTimeout time.Duration
	// attached reports whether an address lies on a network this machine has an interface on; nil means
	// every address does (tests with a fake dial).
	attached func(ip net.IP) bool
}

// attachedHere reports whether ip is inside a network one of this machine's interfaces is on. A libvirt
// network is reachable only from its own host; any other address would be probed along the default route,
// sending packets off this machine towards a network that only exists elsewhere.
func attachedHere(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.Contains(ip) {
			return true
		}
	}
	return false
}

func defaultReadiness() readiness {
	d := &net.Dialer{Timeout: 3 * time.Second}
	return readiness{
		dial:             d.DialContext,
		healthPort:       proxyconf.DefaultHealthPort,
		unreachableAfter: 30 * time.Second,
		attemptTimeout:   5 * time.Second,
		attached:         attachedHere,
	}
}

// probeResult is what one attempt learnt.
type probeResult int

const (
	probeNotReady    probeResult = iota // no answer yet, reachability unknown
	probeReachable                      // the address answered, the proxy not (yet)
	probeUnreachable                    // no route, refused by a firewall, or silence
	probeReady                          // the proxy answered
)

// waitForProxy waits until the proxy answers, or until its address proves unreachable from here; then it
// returns a note saying readiness was not verified and what Create waited for instead.
func (b *Backend) waitForProxy(ctx context.Context, c *conn, dom libvirt.Domain, m metadata, inst *backend.Instance) (string, error) {
	p := m.Placement
	host, what := inst.InternalAddress, "the host reported the guest's address"
	if p.UserNet {
		host, what = firstOf(p.ForwardAddress, DefaultForwardAddress), "libvirt started the domain with its port forward"
	} else if p.IP != "" {
		// A fixed IP is known before the guest boots: probing it now would find a silent address and call
		// it unreachable. The guest's own DHCP lease (or agent) says its network is up.
		what = "the guest took its fixed address from the network's DHCP server"
		err := backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
			var ip string
			err := c.do(ctx, func(l api) error { ip = guestAddress(l, dom, p); return nil })
			if err != nil {
				return false, classify("", err) // ip is fn's, which may still run: see Get
			}
			return ip != "", nil
		})
		if err != nil {
			return "", fmt.Errorf("waiting for the guest to take its address %s: %w", p.IP, err)
		}
	}
	if host == "" {
		return "", backend.Permanent("", "no address to check the proxy at")
	}
	r := b.readiness
	if ip := net.ParseIP(host); !p.UserNet && r.attached != nil && ip != nil && !r.attached(ip) {
		return fmt.Sprintf("readiness not verified: the proxy's address %s is on no network this machine is attached to, so it was not probed from where the provider runs; Create waited only until %s", host, what), nil
	}
	check := fmt.Sprintf("a connection to %s and 200 from http://%s%s", net.JoinHostPort(host, strconv.Itoa(inst.Port)),
		net.JoinHostPort(host, strconv.Itoa(r.healthPort)), proxyconf.HealthPath)
	if p.UserNet {
		check = fmt.Sprintf("an HTTP answer from the forwarded port %s", net.JoinHostPort(host, strconv.Itoa(p.ForwardPort)))
	}
	start := time.Now()
	reachable, unverified := false, false
	var last error
	err := backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		var res probeResult
		if p.UserNet {
			res, last = r.probeForward(ctx, host, p.ForwardPort)
		} else {
			res, last = r.probeProxy(ctx, host, inst.Port)
		}
		switch res {
		case probeReady:
			return true, nil
		case probeReachable:
			reachable = true
		case probeUnreachable:
			if !reachable && time.Since(start) >= r.unreachableAfter {
				unverified = true
				return true, nil
			}
		}
		return false, backend.NewError(backend.ClassTransient, "", last)
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the proxy at %s to answer (%s): %w", host, check, err)
	}
	if unverified {
		return fmt.Sprintf("readiness not verified: the proxy's address %s is not reachable from where the provider runs (%v); Create waited only until %s", host, last, what), nil
	}
	return "", nil
}

// guestAddress is the address the guest itself reported: its DHCP lease on a libvirt network, or its agent.
func guestAddress(l api, dom libvirt.Domain, p metaPlacement) string {
	if p.Network != "" {
		if ip := leaseAddress(l, p.Network, p.MAC); ip != "" {
			return ip
		}
	}
	return agentAddress(l, dom, p.MAC)
}

// probeProxy connects to the proxy port, then asks the health endpoint.
func (r readiness) probeProxy(ctx context.Context, host string, port int) (probeResult, error) {
	actx, cancel := context.WithTimeout(ctx, r.attemptTimeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := r.dial(actx, "tcp", addr)
	if err != nil {
		return dialResult(ctx, err, false), err
	}
	_ = conn.Close() // only whether the connect succeeded matters
	status, err := r.get(actx, net.JoinHostPort(host, strconv.Itoa(r.healthPort)), proxyconf.HealthPath)
	switch {
	case err != nil:
		return probeReachable, err
	case status != http.StatusOK:
		return probeReachable, fmt.Errorf("health endpoint http://%s:%d%s answered %d", host, r.healthPort, proxyconf.HealthPath, status)
	}
	return probeReady, nil
}

// probeForward asks the forwarded proxy port for anything HTTP.
func (r readiness) probeForward(ctx context.Context, host string, port int) (probeResult, error) {
	actx, cancel := context.WithTimeout(ctx, r.attemptTimeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if _, err := r.get(actx, addr, "/"); err != nil {
		var dial *dialFailure
		if errors.As(err, &dial) {
			return dialResult(ctx, dial.err, true), err
		}
		return probeReachable, err
	}
	return probeReady, nil
}

// dialFailure marks an error of the connect, as opposed to the HTTP exchange after it.
type dialFailure struct{ err error }

func (d *dialFailure) Error() string { return d.err.Error() }
func (d *dialFailure) Unwrap() error { return d.err }

// get makes one HTTP/1.1 GET of path at addr, straight to addr (never through a proxy from the environment),
// and returns the status.
func (r readiness) get(ctx context.Context, addr, path string) (int, error) {
	conn, err := r.dial(ctx, "tcp", addr)
	if err != nil {
		return 0, &dialFailure{err}
	}
	defer func() { _ = conn.Close() }() // the status is read already, or the error that ended the request is reported
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d) // fails only on a closed connection, whose write below fails and is reported
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: terraform-provider-egress\r\nConnection: close\r\n\r\n", path, addr); err != nil {
		return 0, fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	_ = resp.Body.Close() // only the status matters; the deferred close releases the connection
	return resp.StatusCode, nil
}

// dialResult says what a failed connect tells about the address. With user-mode networking a refusal
// means the forwarded port is not here (passt accepts whenever it runs). A connect cut short because the
// caller's ctx ended tells nothing: only silence until the attempt's own timeout counts as unreachable.
func dialResult(caller context.Context, err error, userNet bool) probeResult {
	var ne net.Error
	switch {
	case caller.Err() != nil:
		return probeNotReady
	case errors.Is(err, syscall.ECONNREFUSED):
		if userNet {
			return probeUnreachable
		}
		return probeReachable
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return probeUnreachable
	}
	return probeNotReady
}
