// Package libvirtconn is the kvm backend's connection layer: a pool of connections to each libvirt daemon,
// dialled lazily and again after a loss, with every call bounded by the caller's context; the transports
// libvirt clients use (unix, tcp, tls, ssh) in pure Go; and the narrow API the backend calls through. It
// classes no error: the backend decides which dial failures are worth another try (Host.Retryable), and
// the error types here (ConfigError, UnreachableError, ConnLostError) tell it what happened.
package libvirtconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"
)

// Session is one live connection to a libvirt daemon.
type Session struct {
	API API
	// Lost is closed when the connection breaks, whoever noticed first: the daemon, the network or us.
	Lost <-chan struct{}
	// Close ends the connection.
	Close func()
}

func (s *Session) isLost() bool {
	select {
	case <-s.Lost:
		return true
	default:
		return false
	}
}

// Host is the daemon a Pool connects to, and how.
type Host struct {
	// Name and URI name the host in errors and log lines.
	Name string
	URI  string
	// DialTimeout bounds connecting: attempts are retried within it, then the host is unreachable.
	DialTimeout time.Duration
	// Dial opens a session to the host (Dial with the host's Endpoint, or an in-memory fake in tests).
	Dial func(ctx context.Context) (*Session, error)
	// Retryable says whether a failed dial may be tried again within DialTimeout. The backend decides, by
	// its classes of errors: a refused login is not, a missing socket is.
	Retryable func(error) bool
	// LogSubsystem is the tflog subsystem of the pool's debug lines: the backend's.
	LogSubsystem string
}

// Pool is one host's connections: dialled on first use, shared by every call to that host, and dialled again
// after the daemon drops them (a libvirtd restart must not need a provider restart).
//
// A host gets more than one connection only when operations pile up on it: libvirtd serves at most
// max_client_requests calls of one client at a time (5 unless its administrator changed it), and some calls
// hold their slot for seconds. DomainDestroy waits until QEMU has exited, about two seconds per domain seen
// here, so ten proxies destroyed side by side on one connection waited in line for five slots, and took
// three times as long as virsh did with a connection each (scripts/bench-kvm.sh). One operation always runs
// on one connection, so what a cut connection interrupts is still one operation's call.
type Pool struct {
	host Host

	mu sync.Mutex
	// sessions are the live connections (some may have broken since they were last looked at), each with the
	// operations running on it.
	sessions []*pooled
	// extraDials counts the connections beyond the first being dialled.
	extraDials int
	// interrupted is the call a lost connection cut off, until the redial it causes is logged.
	interrupted string
	// streamStall, when set, replaces both of the package's stall limits: tests that move only seeds give up
	// sooner. Not under mu, which a dial holds for as long as it takes.
	streamStall atomic.Int64
}

// NewPool returns the pool of h's connections. It dials nothing: the first Do does.
func NewPool(h Host) *Pool { return &Pool{host: h} }

// SetStreamStall makes d, instead of the package's stall limits, how long a volume stream may move no data
// before it is abandoned: tests that move only seeds, which take milliseconds, give up sooner.
func (c *Pool) SetStreamStall(d time.Duration) { c.streamStall.Store(int64(d)) }

// stallFor is how long the volume stream of method may move no data before it is abandoned.
func (c *Pool) stallFor(method string) time.Duration {
	switch {
	case c.streamStall.Load() > 0:
		return time.Duration(c.streamStall.Load())
	case method == "StorageVolDownload":
		return downloadStall
	default:
		return uploadStall
	}
}

// pooled is one of a host's connections and the number of operations running on it.
type pooled struct {
	s    *Session
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

// CallGrace is how long a call its caller gave up on may still run. go-libvirt calls cannot be cancelled, so
// the caller returns at once; a call still unanswered after this is taken as a stuck daemon and the
// connection is closed, which ends the call and lets the next one dial afresh.
const CallGrace = 15 * time.Second

// callGrace is CallGrace, which tests shorten.
var callGrace = CallGrace

// A volume stream that moves no data for this long is abandoned with its connection, and the operation
// retries on a new one. go-libvirt can deadlock at the end of a download: when libvirtd sends one more packet
// for the call after the one go-libvirt took as the stream's end, its reader blocks handing that packet to a
// call that has stopped listening, while holding the lock the call needs to return; the call and every later
// one on that connection then wait for good (go-libvirt's issue 241 describes the same lock held across that
// send). Closing the socket ends neither, so Do stops waiting on its own. The one cause seen, libvirtd sending
// a download's data before its reply (about one download in forty), packetOrder now removes; this stays for
// any other, and for a daemon that stops sending. Only seeds are downloaded, which take milliseconds; an upload
// may be an image, whose last acknowledgement waits for the daemon to flush it.
const (
	downloadStall = 30 * time.Second
	uploadStall   = 2 * time.Minute
)

// Do runs fn, which may make several libvirt calls, against the host. It returns when fn does or when ctx ends,
// whichever is first.
func (c *Pool) Do(ctx context.Context, fn func(API) error) error {
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
		next: s.API,
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
		return &ConnLostError{Host: c.host.Name, Call: call, Err: err}
	}
	lost := s.Lost
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
func (c *Pool) lost(ctx context.Context, s *Session, call string, err error) {
	c.mu.Lock()
	if c.index(s) >= 0 {
		c.interrupted = call
	}
	c.mu.Unlock()
	c.drop(s)
	tflog.SubsystemDebug(ctx, c.host.LogSubsystem, "libvirt connection lost; the call's outcome is unknown and the operation is retried",
		map[string]any{"host": c.host.Name, "uri": c.host.URI, "interrupted_call": call, "error": err.Error()})
}

// session returns a live session for one operation, and the release to call when the operation ends. It is
// the least busy connection, unless that one already carries sessionLoad operations: then another is dialled,
// up to maxSessions. The first connection is dialled (or redialled after a loss) as the host's only one;
// when an extra one cannot be had at once, the operation shares the least busy.
func (c *Pool) session(ctx context.Context) (*Session, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A redial is a dial after a connection was lost, found lost here or dropped by lost.
	redial := c.interrupted != ""
	live := c.sessions[:0]
	for _, p := range c.sessions {
		if p.s.isLost() {
			redial = true
			p.s.Close()
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
			tflog.SubsystemDebug(ctx, c.host.LogSubsystem, "libvirt connection redialled",
				map[string]any{"host": c.host.Name, "uri": c.host.URI, "interrupted_call": c.interrupted, "dial_ms": time.Since(start).Milliseconds()})
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
func (c *Pool) dialExtra(ctx context.Context) *pooled {
	c.extraDials++
	c.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, c.host.DialTimeout)
	s, err := c.host.Dial(dctx)
	cancel()
	c.mu.Lock()
	c.extraDials--
	if err != nil {
		tflog.SubsystemDebug(ctx, c.host.LogSubsystem, "another libvirt connection could not be dialled; sharing one",
			map[string]any{"host": c.host.Name, "uri": c.host.URI, "error": err.Error()})
		return nil
	}
	p := &pooled{s: s}
	c.sessions = append(c.sessions, p)
	return p
}

// leastBusy is the session with the fewest operations, or nil when there is none. c.mu is held.
func (c *Pool) leastBusy() *pooled {
	var best *pooled
	for _, p := range c.sessions {
		if best == nil || p.busy < best.busy {
			best = p
		}
	}
	return best
}

// index is where s is among the host's sessions, or -1. c.mu is held.
func (c *Pool) index(s *Session) int {
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
// bad key: Host.Retryable says which), or the host's DialTimeout passes. Then the host is unreachable: the
// backend takes an UnreachableError as Permanent, so callers stop at once instead of retrying until their
// own timeout (20 minutes for a create), and it asks whether libvirtd runs there. When the caller's ctx ends first, its error is returned: the caller gave up,
// which says nothing about the host.
func (c *Pool) dialRetrying(ctx context.Context) (*Session, error) {
	dctx, cancel := context.WithTimeout(ctx, c.host.DialTimeout)
	defer cancel()
	var delay time.Duration
	for {
		s, err := c.host.Dial(dctx)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, &dialError{host: c.host.Name, uri: c.host.URI, err: errors.Join(ctx.Err(), err)}
		}
		if !c.host.Retryable(err) {
			return nil, &dialError{host: c.host.Name, uri: c.host.URI, err: err}
		}
		delay = min(max(2*delay, dialFirstDelay), dialMaxDelay)
		tflog.SubsystemDebug(ctx, c.host.LogSubsystem, "libvirt dial failed; trying again",
			map[string]any{"host": c.host.Name, "uri": c.host.URI, "retry_in_ms": delay.Milliseconds(), "error": err.Error()})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			continue
		case <-dctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, &dialError{host: c.host.Name, uri: c.host.URI, err: errors.Join(ctx.Err(), err)}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// The last attempt was cut off by the DialTimeout itself: say what that means, and keep the error
			// from reading as the caller's deadline.
			err = errNoAnswer
		}
		return nil, &UnreachableError{Host: c.host.Name, URI: c.host.URI, After: c.host.DialTimeout, Last: err}
	}
}

func (c *Pool) drop(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Close()
	if i := c.index(s); i >= 0 {
		c.sessions = append(c.sessions[:i], c.sessions[i+1:]...)
	}
}

// Close ends the host's sessions, if any. The pool dials again if used afterwards.
func (c *Pool) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.sessions {
		p.s.Close()
	}
	c.sessions = nil
}
