package libvirtfault

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// daemon answers every call with a reply of the same serial, as libvirtd does, and remembers the serials
// of the calls it saw.
type daemon struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []uint32
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "daemon.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return d
}

func (d *daemon) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	for {
		_, h, err := readPacket(c)
		if err != nil {
			return
		}
		d.mu.Lock()
		d.seen = append(d.seen, h.serial)
		d.mu.Unlock()
		if _, err := c.Write(packet(h.procedure, typeReply, h.serial)); err != nil {
			return
		}
	}
}

func (d *daemon) calls() []uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint32(nil), d.seen...)
}

// packet is a header-only packet of the remote program, with a payload so framing is exercised.
func packet(proc, typ int32, serial uint32) []byte {
	payload := []byte("payload")
	b := make([]byte, lenSize+headerSize+len(payload))
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)))
	binary.BigEndian.PutUint32(b[4:], programRemote)
	binary.BigEndian.PutUint32(b[8:], 1)
	binary.BigEndian.PutUint32(b[12:], uint32(proc))
	binary.BigEndian.PutUint32(b[16:], uint32(typ))
	binary.BigEndian.PutUint32(b[20:], serial)
	copy(b[lenSize+headerSize:], payload)
	return b
}

// call sends one call on c and reads its reply; an error means the connection ended.
func call(c net.Conn, proc int32, serial uint32) error {
	if _, err := c.Write(packet(proc, typeCall, serial)); err != nil {
		return err
	}
	_, h, err := readPacket(c)
	if err == nil && h.serial != serial {
		return errors.New("reply to another call")
	}
	return err
}

func TestCutsAtTheArmedCall(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		pos Position
		// the daemon saw the cut call: it was carried out, only its answer is lost
		daemonSaw bool
	}{
		"before the call":  {BeforeCall, false},
		"before its reply": {BeforeReply, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t)
			p, err := Start(t.TempDir(), d.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			p.CutAt(3, tc.pos)
			c, err := net.Dial("unix", p.Socket())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			for serial := uint32(1); serial <= 2; serial++ {
				if err := call(c, 9, serial); err != nil {
					t.Fatalf("call %d before the armed one: %v", serial, err)
				}
			}
			if err := call(c, 212, 3); !errors.Is(err, io.EOF) {
				t.Fatalf("armed call = %v, want the connection ended", err)
			}
			saw := d.calls()
			if got := len(saw) == 3; got != tc.daemonSaw {
				t.Errorf("daemon saw calls %v; want the cut call seen: %v", saw, tc.daemonSaw)
			}
			cuts := p.Cuts()
			if len(cuts) != 1 || cuts[0].Call.N != 3 || cuts[0].Position != tc.pos || cuts[0].Call.Name() != "DomainGetState" {
				t.Errorf("cuts = %+v, want one %s at call 3 (DomainGetState)", cuts, tc.pos)
			}
			// Disarmed after one cut: a new connection goes through, and counting goes on.
			c2, err := net.Dial("unix", p.Socket())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c2.Close() }()
			if err := call(c2, 9, 1); err != nil {
				t.Fatalf("call after the cut: %v", err)
			}
			if calls := p.Calls(); len(calls) != 4 || calls[3].Conn != 2 {
				t.Errorf("calls = %+v, want 4, the last on connection 2", calls)
			}
			if err := p.Err(); err != nil {
				t.Errorf("framing error: %v", err)
			}
		})
	}
}

func TestRandomLifetimesEndConnections(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	p, err := Start(t.TempDir(), d.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.RandomLifetimes(42, time.Millisecond, 2*time.Millisecond)
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	// The connection ends by itself: a read returns once the lifetime cut it, however slow the machine.
	if _, _, err := readPacket(c); !errors.Is(err, io.EOF) {
		t.Fatalf("read = %v, want the connection ended by its lifetime", err)
	}
	if cuts := p.Cuts(); len(cuts) != 1 || cuts[0].Position != Lifetime {
		t.Errorf("cuts = %+v, want one lifetime cut", cuts)
	}
}

func TestRejectsWhatIsNotLibvirt(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	p, err := Start(t.TempDir(), d.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readPacket(c); err == nil {
		t.Fatal("the proxy answered a packet that is not libvirt's")
	}
	if err := p.Err(); !errors.Is(err, errFraming) {
		t.Errorf("Err = %v, want a framing error", err)
	}
}
