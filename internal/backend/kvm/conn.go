package kvm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// session is one live connection to a libvirt daemon.
type session struct {
	api api
	// lost is closed when the connection breaks, whoever noticed first: the daemon, the network or us.
	lost  <-chan struct{}
	close func()
}

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// dialFunc opens a session to one configured host. Tests replace it with an in-memory fake.
type dialFunc func(ctx context.Context, h HostConfig, t target) (*session, error)

// conn is one host's connections: dialled on first use, shared by every call to that host, and dialled again
// after the daemon drops them (a libvirtd restart must not need a provider restart).
//
// A host gets more than one connection only when operations pile up on it: libvirtd serves at most
// max_client_requests calls of one client at a time (5 unless its administrator changed it), and some calls
// hold their slot for seconds. DomainDestroy waits until QEMU has exited, about two seconds per domain seen
// here, so ten proxies destroyed side by side on one connection waited in line for five slots, and took
// three times as long as virsh did with a connection each (scripts/bench-kvm.sh). One operation always runs
// on one connection, so what a cut connection interrupts is still one operation's call.
type conn struct {
	name   string
	host   HostConfig
	target target
	dial   dialFunc

	mu sync.Mutex
	// sessions are the live connections (some may have broken since they were last looked at), each with the
	// operations running on it.
	sessions []*pooled
	// extraDials counts the connections beyond the first being dialled.
	extraDials int
	// autoType caches what "auto" resolves to on this host: its capabilities do not change while it runs.
	autoType string
	// withoutPasst is set once the daemon refused libvirt's passt backend.
	withoutPasst bool
	// interrupted is the call a lost connection cut off, until the redial it causes is logged.
	interrupted string
	// streamStall, when set, replaces both of the package's stall limits: tests that move only seeds give up
	// sooner.
	streamStall time.Duration
}

// stallFor is how long the volume stream of method may move no data before it is abandoned.
func (c *conn) stallFor(method string) time.Duration {
	switch {
	case c.streamStall > 0:
		return c.streamStall
	case method == "StorageVolDownload":
		return downloadStall
	default:
		return uploadStall
	}
}

// pooled is one of a host's connections and the number of operations running on it.
type pooled struct {
	s    *session
	busy int
}

// A connection takes up to sessionLoad operations before the host gets another, and a host gets at most
// maxSessions. An operation makes one call at a time (Delete a few once its domain is stopped), so
// sessionLoad operations stay within libvirtd's default five calls per client; maxSessions caps what one
// provider process asks of the daemon (its default max_workers is 20).
const (
	sessionLoad = 4
	maxSessions = 4
)

// callGrace is how long a call its caller gave up on may still run. go-libvirt calls cannot be cancelled, so
// the caller returns at once; a call still unanswered after this is taken as a stuck daemon and the
// connection is closed, which ends the call and lets the next one dial afresh.
var callGrace = 15 * time.Second

// A volume stream that moves no data for this long is abandoned with its connection, and the operation
// retries on a new one. go-libvirt can deadlock at the end of a download: when libvirtd sends one more packet
// for the call after the one go-libvirt took as the stream's end, its reader blocks handing that packet to a
// call that has stopped listening, while holding the lock the call needs to return; the call and every later
// one on that connection then wait for good (seen once in about fifty seed downloads right after an upload,
// libvirt 9.0; go-libvirt's issue 241 describes the same lock held across that send). Closing the socket ends
// neither, so do stops waiting on its own. Only seeds are downloaded, which take milliseconds; an upload may
// be an image, whose last acknowledgement waits for the daemon to flush it.
const (
	downloadStall = 30 * time.Second
	uploadStall   = 2 * time.Minute
)

// do runs fn, which may make several libvirt calls, against the host. It returns when fn does or when ctx ends,
// whichever is first.
func (c *conn) do(ctx context.Context, fn func(api) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, release, err := c.session(ctx)
	if err != nil {
		return err
	}
	defer release()
	// The call in flight, as fn's own: when the connection drops, it is the one whose answer was lost.
	var mu sync.Mutex
	var last string
	stalled := make(chan error, 1)
	traced := &tracedAPI{
		next: s.api,
		call: func(m string) { mu.Lock(); last = m; mu.Unlock() },
		stream: func(m string) (func(), func()) {
			stall := c.stallFor(m)
			t := time.AfterFunc(stall, func() {
				select {
				case stalled <- fmt.Errorf("%s moved no data for %s; its connection was closed and the call abandoned", m, stall):
				default:
				}
				c.drop(s)
			})
			return func() { t.Reset(stall) }, func() { t.Stop() }
		},
	}
	res := make(chan error, 1)
	go func() { res <- fn(traced) }()
	abandoned := func(err error) error {
		mu.Lock()
		call := last
		mu.Unlock()
		c.lost(ctx, s, call, err)
		return &connLostError{host: c.name, call: call, err: err}
	}
	lost := s.lost
	giveUpTimer := time.NewTimer(callGrace)
	giveUpTimer.Stop()
	defer giveUpTimer.Stop()
	var giveUp <-chan time.Time
	for {
		select {
		case err := <-stalled:
			// fn may never return (see downloadStall): it is left behind with the closed session, on which
			// nothing it still calls can take effect.
			return abandoned(err)
		case <-lost:
			// Calls end with an error once their connection is gone, and fn with them; except those caught in
			// go-libvirt's deadlock (see downloadStall), which a call of another operation on the same session
			// can set off. fn gets callGrace to end before it is left behind.
			lost = nil
			giveUpTimer.Reset(callGrace)
			giveUp = giveUpTimer.C
		case <-giveUp:
			return abandoned(fmt.Errorf("%w, and the call still had not ended %s later", errLostUnderCall, callGrace))
		case err := <-res:
			if s.isLost() {
				// Without an error of its own, fn may still have swallowed one: the reads it makes on a best
				// effort basis (an address, the guest agent's ping) fail quietly, and a result built on them
				// would say "no agent" where the connection broke. fn is run again instead.
				if err == nil {
					err = errLostUnderCall
				}
				select {
				case stall := <-stalled:
					err = fmt.Errorf("%w: %w", stall, err)
				default:
				}
				return abandoned(err)
			}
			return err
		case <-ctx.Done():
			go func() {
				t := time.NewTimer(callGrace)
				defer t.Stop()
				select {
				case err := <-res:
					_ = err // the caller has returned ctx's error: fn's own result has nobody to go to
				case <-t.C:
					c.drop(s)
				}
			}()
			return ctx.Err()
		}
	}
}

// lost drops a session that broke under call and logs it: the operation's retry redials.
func (c *conn) lost(ctx context.Context, s *session, call string, err error) {
	c.mu.Lock()
	if c.index(s) >= 0 {
		c.interrupted = call
	}
	c.mu.Unlock()
	c.drop(s)
	tflog.SubsystemDebug(ctx, string(Kind), "libvirt connection lost; the call's outcome is unknown and the operation is retried",
		map[string]any{"host": c.name, "uri": c.host.URI, "interrupted_call": call, "error": err.Error()})
}

// session returns a live session for one operation, and the release to call when the operation ends. It is
// the least busy connection, unless that one already carries sessionLoad operations: then another is dialled,
// up to maxSessions. The first connection is dialled (or redialled after a loss) as the host's only one;
// when an extra one cannot be had at once, the operation shares the least busy.
func (c *conn) session(ctx context.Context) (*session, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A redial is a dial after a connection was lost, found lost here or dropped by lost.
	redial := c.interrupted != ""
	live := c.sessions[:0]
	for _, p := range c.sessions {
		if p.s.isLost() {
			redial = true
			p.s.close()
			continue
		}
		live = append(live, p)
	}
	clear(c.sessions[len(live):])
	c.sessions = live
	best := c.leastBusy()
	if best != nil && best.busy >= sessionLoad && len(c.sessions)+c.extraDials < maxSessions {
		if best = c.dialExtra(ctx); best == nil {
			best = c.leastBusy() // the others may have changed while it dialled
		}
	}
	if best != nil {
		// The operation goes on over a connection that is up: there is no redial to report.
		c.interrupted = ""
	} else {
		start := time.Now()
		s, err := c.dialRetrying(ctx)
		if err != nil {
			return nil, nil, err
		}
		if redial {
			// Which call was cut off, and what getting back cost: a flaky link shows up here before it fails
			// anything.
			tflog.SubsystemDebug(ctx, string(Kind), "libvirt connection redialled",
				map[string]any{"host": c.name, "uri": c.host.URI, "interrupted_call": c.interrupted, "dial_ms": time.Since(start).Milliseconds()})
		}
		c.interrupted = ""
		best = &pooled{s: s}
		c.sessions = append(c.sessions, best)
	}
	best.busy++
	p := best
	return p.s, sync.OnceFunc(func() {
		c.mu.Lock()
		p.busy--
		c.mu.Unlock()
	}), nil
}

// dialExtra dials one more connection to a host that has one, once, without holding c.mu (the operations on
// the others go on meanwhile, and a burst of them dials several at once), and adds it. nil: it could not be
// had, and the caller shares one that is.
func (c *conn) dialExtra(ctx context.Context) *pooled {
	c.extraDials++
	c.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, c.host.DialTimeout)
	s, err := c.dial(dctx, c.host, c.target)
	cancel()
	c.mu.Lock()
	c.extraDials--
	if err != nil {
		tflog.SubsystemDebug(ctx, string(Kind), "another libvirt connection could not be dialled; sharing one",
			map[string]any{"host": c.name, "uri": c.host.URI, "error": err.Error()})
		return nil
	}
	p := &pooled{s: s}
	c.sessions = append(c.sessions, p)
	return p
}

// leastBusy is the session with the fewest operations, or nil when there is none. c.mu is held.
func (c *conn) leastBusy() *pooled {
	var best *pooled
	for _, p := range c.sessions {
		if best == nil || p.busy < best.busy {
			best = p
		}
	}
	return best
}

// index is where s is among the host's sessions, or -1. c.mu is held.
func (c *conn) index(s *session) int {
	for i, p := range c.sessions {
		if p.s == s {
			return i
		}
	}
	return -1
}

// Dial attempts within a host's DialTimeout start dialFirstDelay apart and double up to dialMaxDelay: a
// daemon restarting (systemd brings its socket back within a second or two) is waited for, a host that is
// not there is not waited for long.
const (
	dialFirstDelay = 250 * time.Millisecond
	dialMaxDelay   = 4 * time.Second
)

// dialRetrying dials until a session opens, an attempt fails in a way no retry fixes (a refused login, a
// bad key), or the host's DialTimeout passes. Then the host is unreachable: that error is Permanent, so
// callers stop at once instead of retrying until their own timeout (20 minutes for a create), and it asks
// whether libvirtd runs there. When the caller's ctx ends first, its error is returned: the caller gave up,
// which says nothing about the host.
func (c *conn) dialRetrying(ctx context.Context) (*session, error) {
	dctx, cancel := context.WithTimeout(ctx, c.host.DialTimeout)
	defer cancel()
	var delay time.Duration
	for {
		s, err := c.dial(dctx, c.host, c.target)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, &dialError{host: c.name, uri: c.host.URI, err: errors.Join(ctx.Err(), err)}
		}
		if cls := classOf(err); cls != backend.ClassTransient && cls != backend.ClassUnclassified {
			return nil, &dialError{host: c.name, uri: c.host.URI, err: err}
		}
		delay = min(max(2*delay, dialFirstDelay), dialMaxDelay)
		tflog.SubsystemDebug(ctx, string(Kind), "libvirt dial failed; trying again",
			map[string]any{"host": c.name, "uri": c.host.URI, "retry_in_ms": delay.Milliseconds(), "error": err.Error()})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			continue
		case <-dctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, &dialError{host: c.name, uri: c.host.URI, err: errors.Join(ctx.Err(), err)}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// The last attempt was cut off by the DialTimeout itself: say what that means, and keep the error
			// from reading as the caller's deadline.
			err = errNoAnswer
		}
		return nil, &unreachableError{host: c.name, uri: c.host.URI, after: c.host.DialTimeout, last: err}
	}
}

func (c *conn) drop(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.close()
	if i := c.index(s); i >= 0 {
		c.sessions = append(c.sessions[:i], c.sessions[i+1:]...)
	}
}

// close ends the host's sessions, if any.
func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.sessions {
		p.s.close()
	}
	c.sessions = nil
}

// dialLibvirt is the real dialFunc: the transport, then libvirt's handshake (auth list, connect open), all
// within ctx.
func dialLibvirt(ctx context.Context, h HostConfig, t target) (*session, error) {
	nc, err := dialTransport(ctx, h, t)
	if err != nil {
		return nil, err
	}
	w := &watchedConn{Conn: nc, lost: make(chan struct{})}
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(w))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(libvirt.ConnectURI(t.name)) }()
	select {
	case err := <-done:
		if err != nil {
			_ = w.Close() // the handshake's error is the one worth reporting
			if re := w.readError(); tlsRefusal(re) {
				// go-libvirt reports the broken stream as an interrupted call; the read says why it broke.
				return nil, &configError{fmt.Errorf("TLS handshake with %s: %w", t.host, re)}
			}
			return nil, err
		}
	case <-ctx.Done():
		_ = w.Close() // ends the handshake's pending call; ctx's error is the one worth reporting
		return nil, ctx.Err()
	}
	// Closing drops the session: nothing is left to flush, so a close error has no use.
	return &session{api: l, lost: w.lost, close: func() { _ = w.Close() }}, nil
}

// watchedConn notices a broken connection itself: go-libvirt's own Disconnected channel can miss a drop that
// happens during its handshake.
type watchedConn struct {
	net.Conn
	once sync.Once
	lost chan struct{}

	mu      sync.Mutex
	readErr error // the first read error, which says why the stream ended
}

func (w *watchedConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if err != nil {
		w.mu.Lock()
		if w.readErr == nil {
			w.readErr = err
		}
		w.mu.Unlock()
		w.markLost()
	}
	return n, err
}

func (w *watchedConn) readError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readErr
}

func (w *watchedConn) Write(b []byte) (int, error) {
	n, err := w.Conn.Write(b)
	if err != nil {
		w.markLost()
	}
	return n, err
}

func (w *watchedConn) Close() error {
	w.markLost()
	return w.Conn.Close()
}

func (w *watchedConn) markLost() { w.once.Do(func() { close(w.lost) }) }

// dialError is a host that could not be reached or refused the connection.
type dialError struct {
	host, uri string
	err       error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("connecting to kvm host %q (%s): %v", e.host, e.uri, e.err)
}
func (e *dialError) Unwrap() error { return e.err }

// unreachableError is a host that no dial reached within its DialTimeout.
type unreachableError struct {
	host, uri string
	after     time.Duration
	last      error
}

var errNoAnswer = errors.New("no answer: the connection or libvirt's handshake did not complete")

func (e *unreachableError) Error() string {
	return fmt.Sprintf("kvm host %q (%s) could not be reached within %v: is libvirtd running there, and does the URI point at it? Last error: %v",
		e.host, e.uri, e.after, e.last)
}
func (e *unreachableError) Unwrap() error { return e.last }

// errLostUnderCall is the error of a run whose calls all answered, or whose failures were ignored, while the
// connection broke.
var errLostUnderCall = errors.New("the connection broke while the calls ran")

// connLostError is a call that failed because the connection broke under it.
type connLostError struct {
	host string
	call string // the api method whose answer was lost
	err  error
}

func (e *connLostError) Error() string {
	if e.call == "" {
		return fmt.Sprintf("connection to kvm host %q lost: %v", e.host, e.err)
	}
	return fmt.Sprintf("connection to kvm host %q lost during %s: %v", e.host, e.call, e.err)
}
func (e *connLostError) Unwrap() error { return e.err }
