package kvm

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

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
			var ue *libvirtconn.UnreachableError
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
	c := newConn("h", HostConfig{URI: "qemu:///system", DialTimeout: time.Hour}, func(context.Context, HostConfig, target) (*libvirtconn.Session, error) {
		if dials.Add(1) == 2 {
			cancel()
		}
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}
	})
	err := c.do(ctx, func(api) error { return nil })
	var ue *libvirtconn.UnreachableError
	if !errors.Is(err, context.Canceled) || errors.As(err, &ue) || backend.ClassOf(classify("h", err)) != backend.ClassTransient {
		t.Errorf("do = %v, want the caller's cancellation, Transient", err)
	}
	if dials.Load() != 2 {
		t.Errorf("dialled %d times, want 2: a missing socket is retried within the DialTimeout", dials.Load())
	}
}
