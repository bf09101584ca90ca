package kvm

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// stuckAPI never answers ConnectGetType until released: a daemon that hangs.
type stuckAPI struct {
	api
	release chan struct{}
}

func (s *stuckAPI) ConnectGetType() (string, error) {
	<-s.release
	return "", errors.New("connection closed")
}

func TestConnCallBoundedByContextAndStuckConnectionDropped(t *testing.T) {
	grace := callGrace
	callGrace = 50 * time.Millisecond
	t.Cleanup(func() { callGrace = grace })

	var dials atomic.Int32
	stuck := &stuckAPI{release: make(chan struct{})}
	c := &conn{name: "h", host: HostConfig{DialTimeout: time.Second}, dial: func(context.Context, HostConfig, target) (*session, error) {
		dials.Add(1)
		lost := make(chan struct{})
		return &session{api: stuck, lost: lost, close: func() {
			select {
			case <-lost:
			default:
				close(lost)
				close(stuck.release) // closing the connection ends the pending call, as with go-libvirt
			}
		}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.do(ctx, func(l api) error { _, err := l.ConnectGetType(); return err })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("do on a hung daemon = %v after %v, want the deadline promptly", err, time.Since(start))
	}
	// After the grace period the stuck connection is closed, and the next call dials afresh.
	time.Sleep(200 * time.Millisecond)
	if err := c.do(context.Background(), func(l api) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("dialled %d times, want 2 (once, then again after the stuck connection was dropped)", n)
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

// TestDialHungDaemon: a socket that accepts and never answers libvirt's handshake must not hang the caller.
func TestDialHungDaemon(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }() // ends the accept loop; the socket file goes with t.TempDir
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Held open, never answered: a hung daemon. Closed only when the accept loop ends.
			defer func() { _ = c.Close() }()
		}
	}()
	b, err := New(Config{Hosts: map[string]HostConfig{"h": {URI: "qemu:///system?socket=" + sock, BaseVolume: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = b.Get(ctx, backend.ProviderID{Backend: backend.KindKVM, Target: "h", Name: "x"})
	if backend.ClassOf(err) != backend.ClassTransient || time.Since(start) > 2*time.Second {
		t.Fatalf("Get against a hung daemon = %v after %v, want Transient promptly", err, time.Since(start))
	}
}

// TestUnreachableHosts: what no daemon answers fails fast with a class and the URI in the message.
func TestUnreachableHosts(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"nothing on the port": "qemu+tcp://127.0.0.1:1/system",
		"no socket":           "qemu:///system?socket=/nonexistent/libvirt-sock",
	}
	for name, uri := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := New(Config{Hosts: map[string]HostConfig{"h": {URI: uri, BaseVolume: "b"}}})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = b.Get(context.Background(), backend.ProviderID{Backend: backend.KindKVM, Target: "h", Name: "x"})
			if backend.ClassOf(err) != backend.ClassTransient || time.Since(start) > 2*time.Second {
				t.Fatalf("Get = %v after %v, want Transient at once", err, time.Since(start))
			}
			if !contains(err.Error(), uri) {
				t.Errorf("error %q does not name the URI", err)
			}
			list, err := b.ListByTag(context.Background(), backend.Selector{Owner: "o"})
			var le *backend.ListError
			if len(list) != 0 || !errors.As(err, &le) || len(le.Failed) != 1 || le.Failed[0].Scope != "h" {
				t.Errorf("ListByTag = %v, %v; want host h as a failed scope", list, err)
			}
			if h := b.Check(context.Background()); len(h) != 1 || h[0].Healthy || h[0].Reason == "" {
				t.Errorf("Check = %+v", h)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
