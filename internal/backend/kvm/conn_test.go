package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// stuckAPI never answers ConnectGetType until released: a daemon that hangs. entered says the call began.
type stuckAPI struct {
	api
	entered chan struct{}
	release chan struct{}
}

func (s *stuckAPI) ConnectGetType() (string, error) {
	close(s.entered)
	<-s.release
	return "", errors.New("connection closed")
}

func TestConnCallBoundedByContextAndStuckConnectionDropped(t *testing.T) {
	grace := callGrace
	callGrace = 50 * time.Millisecond
	t.Cleanup(func() { callGrace = grace })

	var dials atomic.Int32
	stuck := &stuckAPI{entered: make(chan struct{}), release: make(chan struct{})}
	dropped := make(chan struct{})
	c := &conn{name: "h", host: HostConfig{DialTimeout: time.Minute}, dial: func(context.Context, HostConfig, target) (*session, error) {
		if dials.Add(1) > 1 {
			return &session{api: newFakeHost(), lost: make(chan struct{}), close: func() {}}, nil
		}
		lost := make(chan struct{})
		return &session{api: stuck, lost: lost, close: func() {
			select {
			case <-lost:
			default:
				close(lost)
				close(stuck.release) // closing the connection ends the pending call, as with go-libvirt
				close(dropped)
			}
		}}, nil
	}}
	// The caller gives up once the call is on its way. do must return then: the call itself only ends
	// when the connection is closed, which happens after do has returned and the grace period passed.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stuck.entered; cancel() }()
	err := c.do(ctx, func(l api) error { _, err := l.ConnectGetType(); return err })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("do on a hung daemon = %v, want the caller's cancellation", err)
	}
	// After the grace period the stuck connection is closed, and the next call dials afresh.
	<-dropped
	if err := c.do(context.Background(), func(l api) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("dialled %d times, want 2 (once, then again after the stuck connection was dropped)", n)
	}
}

// silentStreamAPI answers a volume download with nothing until its connection is closed; once closed, the call
// ends as go-libvirt's do. With deadlocked set it never ends, as go-libvirt's download that deadlocks on a
// packet after its stream's end (see downloadStall).
type silentStreamAPI struct {
	api
	closed     chan struct{}
	deadlocked bool
}

func (s *silentStreamAPI) StorageVolDownload(_ libvirt.StorageVol, w io.Writer, _ uint64, _ uint64, _ libvirt.StorageVolDownloadFlags) error {
	if _, err := w.Write([]byte("all of it")); err != nil {
		return err
	}
	<-s.closed
	if s.deadlocked {
		select {}
	}
	return libvirt.ErrInterrupted
}

// chunkyStreamAPI moves a download in chunks, the first at once and the rest when the test lets each go.
type chunkyStreamAPI struct {
	api
	next chan struct{}
}

func (s *chunkyStreamAPI) StorageVolDownload(_ libvirt.StorageVol, w io.Writer, _ uint64, _ uint64, _ libvirt.StorageVolDownloadFlags) error {
	if _, err := w.Write([]byte("first")); err != nil {
		return err
	}
	for range s.next {
		if _, err := w.Write([]byte(" more")); err != nil {
			return err
		}
	}
	return nil
}

func TestConnStalledStreamAbandonedAndRetriedOnANewConnection(t *testing.T) {
	t.Parallel()
	for _, deadlocked := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadlocked=%v", deadlocked), func(t *testing.T) {
			t.Parallel()
			var dials atomic.Int32
			c := &conn{name: "h", host: HostConfig{DialTimeout: time.Minute}, streamStall: 50 * time.Millisecond, dial: func(context.Context, HostConfig, target) (*session, error) {
				if dials.Add(1) > 1 {
					return &session{api: newFakeHost(), lost: make(chan struct{}), close: func() {}}, nil
				}
				lost := make(chan struct{})
				var once sync.Once
				return &session{api: &silentStreamAPI{closed: lost, deadlocked: deadlocked}, lost: lost, close: func() { once.Do(func() { close(lost) }) }}, nil
			}}
			download := func(l api) error {
				return l.StorageVolDownload(libvirt.StorageVol{Name: "seed"}, io.Discard, 0, seedReadLimit, 0)
			}
			err := c.do(context.Background(), download)
			var lost *connLostError
			if !errors.As(err, &lost) || lost.call != "StorageVolDownload" || !strings.Contains(err.Error(), "moved no data") {
				t.Fatalf("a download that stops moving = %v, want a lost connection during StorageVolDownload that says it moved no data", err)
			}
			if cls := classOf(err); cls != backend.ClassTransient {
				t.Errorf("class %s, want Transient: the operation retries it", cls)
			}
			if err := c.do(context.Background(), func(l api) error { _, err := l.ConnectGetType(); return err }); err != nil {
				t.Fatalf("the call after the stalled stream: %v", err)
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("dialled %d times, want 2 (the stalled connection replaced once)", n)
			}
		})
	}
}

// deadlockedConnAPI is a session caught in go-libvirt's deadlock: a download stops moving and never returns,
// and so does every other call on the connection, closed or not.
type deadlockedConnAPI struct {
	silentStreamAPI
	entered chan struct{}
}

func (d *deadlockedConnAPI) ConnectGetType() (string, error) {
	close(d.entered)
	select {}
}

func TestConnCallsStuckOnAnAbandonedConnectionAreAbandonedWithIt(t *testing.T) {
	grace := callGrace
	callGrace = 50 * time.Millisecond
	t.Cleanup(func() { callGrace = grace })

	var dials atomic.Int32
	stuck := &deadlockedConnAPI{entered: make(chan struct{})}
	c := &conn{name: "h", host: HostConfig{DialTimeout: time.Minute}, streamStall: 50 * time.Millisecond, dial: func(context.Context, HostConfig, target) (*session, error) {
		if dials.Add(1) > 1 {
			return &session{api: newFakeHost(), lost: make(chan struct{}), close: func() {}}, nil
		}
		lost := make(chan struct{})
		stuck.closed = lost
		stuck.deadlocked = true
		var once sync.Once
		return &session{api: stuck, lost: lost, close: func() { once.Do(func() { close(lost) }) }}, nil
	}}
	// Another operation's call on the same connection, stuck behind the lock the deadlock holds.
	other := make(chan error, 1)
	go func() {
		other <- c.do(context.Background(), func(l api) error { _, err := l.ConnectGetType(); return err })
	}()
	<-stuck.entered
	err := c.do(context.Background(), func(l api) error {
		return l.StorageVolDownload(libvirt.StorageVol{Name: "seed"}, io.Discard, 0, seedReadLimit, 0)
	})
	var lost *connLostError
	if !errors.As(err, &lost) {
		t.Fatalf("the stalled download = %v, want a lost connection", err)
	}
	select {
	case err := <-other:
		if !errors.As(err, &lost) || lost.call != "ConnectGetType" {
			t.Errorf("the other call = %v, want a lost connection during ConnectGetType", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the other operation's call still waits on the abandoned connection")
	}
	if err := c.do(context.Background(), func(l api) error { _, err := l.ConnectGetType(); return err }); err != nil {
		t.Fatalf("the call after: %v", err)
	}
}

func TestConnStreamThatMovesIsNotCut(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	// An hour: no loaded machine reaches it between two chunks the test hands over at once; the test proves
	// the progress path is wired, not a timing.
	c := &conn{name: "h", host: HostConfig{DialTimeout: time.Minute}, streamStall: time.Hour, dial: func(context.Context, HostConfig, target) (*session, error) {
		return &session{api: &chunkyStreamAPI{next: next}, lost: make(chan struct{}), close: func() {}}, nil
	}}
	var got strings.Builder
	var progressed atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.do(context.Background(), func(l api) error {
			tl, ok := l.(*tracedAPI)
			if !ok {
				return fmt.Errorf("do handed fn a %T, want the traced api", l)
			}
			inner := tl.stream
			tl.stream = func(m string) (func(), func()) {
				p, d := inner(m)
				return func() { progressed.Add(1); p() }, d
			}
			return l.StorageVolDownload(libvirt.StorageVol{Name: "seed"}, &got, 0, seedReadLimit, 0)
		})
	}()
	for range 3 {
		next <- struct{}{}
	}
	close(next)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got.String() != "first more more more" || progressed.Load() != 4 {
		t.Errorf("downloaded %q with %d progress reports, want every chunk through and each reported", got.String(), progressed.Load())
	}
}

func TestConnRedialsAfterLoss(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	var last chan struct{}
	c := &conn{name: "h", host: HostConfig{DialTimeout: time.Second}, dial: func(context.Context, HostConfig, target) (*session, error) {
		dials.Add(1)
		last = make(chan struct{})
		return &session{api: newFakeHost(), lost: last, close: func() {}}, nil
	}}
	for range 3 {
		if err := c.do(context.Background(), func(api) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if dials.Load() != 1 {
		t.Fatalf("dialled %d times for three calls, want 1 (lazy, shared)", dials.Load())
	}
	close(last) // the daemon went away
	if err := c.do(context.Background(), func(api) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if dials.Load() != 2 {
		t.Errorf("dialled %d times, want a redial after the loss", dials.Load())
	}
}

// silentSocket listens on a unix socket and holds every connection open without a byte: a hung daemon,
// or a socket whose daemon never answers.
func silentSocket(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close() // ends the accept loop; the socket file goes with t.TempDir
		<-done
		for _, c := range held {
			_ = c.Close() // nothing was sent: nothing to lose
		}
	})
	return sock
}

// TestUnreachableHosts: a host no daemon answers on is retried only within its DialTimeout, then fails
// Permanent, naming the host and the URI and asking whether libvirtd runs there; ListByTag reports it as a
// failed scope and Check as Unreachable, as fast. The DialTimeout is short so the test is; nothing here
// races it: each case fails the same way however slow the machine.
func TestUnreachableHosts(t *testing.T) {
	t.Parallel()
	tests := map[string]func(t *testing.T) string{
		"no socket":           func(*testing.T) string { return "qemu:///system?socket=/nonexistent/libvirt-sock" },
		"nothing on the port": func(*testing.T) string { return "qemu+tcp://127.0.0.1:1/system" },
		"silent socket":       func(t *testing.T) string { return "qemu:///system?socket=" + silentSocket(t) },
	}
	for name, uriOf := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			uri := uriOf(t)
			// Insecure: the tcp transport is refused before dialling otherwise, and the dial is what is tested.
			b, err := New(Config{Hosts: map[string]HostConfig{"h": {URI: uri, BaseVolume: "b", DialTimeout: time.Second, Insecure: true}}})
			if err != nil {
				t.Fatal(err)
			}
			// The caller would wait far longer: the host's DialTimeout, not the caller, ends the attempt.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err = b.Get(ctx, backend.ProviderID{Backend: Kind, Target: "h", Name: "x"})
			var ue *unreachableError
			if backend.ClassOf(err) != backend.ClassPermanent || backend.Retryable(err) || !errors.As(err, &ue) {
				t.Fatalf("Get = %v, want Permanent: unreachable", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Get = %v: an unreachable host must not read as the caller's deadline", err)
			}
			for _, want := range []string{`"h"`, uri, "is libvirtd running there"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			list, err := b.ListByTag(ctx, backend.Selector{Owner: "o"})
			var le *backend.ListError
			if len(list) != 0 || !errors.As(err, &le) || len(le.Failed) != 1 || le.Failed[0].Scope != "h" || !errors.As(le.Failed[0].Err, &ue) {
				t.Errorf("ListByTag = %v, %v; want host h as a failed scope, unreachable", list, err)
			}
			h := b.Check(ctx)
			if len(h) != 1 || h[0].Healthy || h[0].Reason != backend.HealthUnreachable || !strings.Contains(h[0].Details["message"], uri) {
				t.Errorf("Check = %+v, want Unreachable with the message in details", h)
			}
		})
	}
}

// A caller that gives up before the host's DialTimeout gets its own ctx error back, Transient: its giving up
// says nothing about the host.
func TestDialEndedByCaller(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &conn{name: "h", host: HostConfig{URI: "qemu:///system", DialTimeout: time.Hour}, dial: func(context.Context, HostConfig, target) (*session, error) {
		if dials.Add(1) == 2 {
			cancel()
		}
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}
	}}
	err := c.do(ctx, func(api) error { return nil })
	var ue *unreachableError
	if !errors.Is(err, context.Canceled) || errors.As(err, &ue) || backend.ClassOf(classify("h", err)) != backend.ClassTransient {
		t.Errorf("do = %v, want the caller's cancellation, Transient", err)
	}
	if dials.Load() != 2 {
		t.Errorf("dialled %d times, want 2: a missing socket is retried within the DialTimeout", dials.Load())
	}
}
