package squidtest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortNeverGivesAPortTwice asks for a few thousand ports, enough that a random draw would repeat one
// by chance many times over, and checks that none comes back twice.
func TestFreePortNeverGivesAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
}

// TestFreePortIsOutsideTheEphemeralRange: an outgoing connection never takes a port FreePort gave as its
// local port, so a test's Squid that binds the port a moment later finds it free. The CI once failed on it:
// Squid's bind of a port FreePort had given (then from the ephemeral range) met "Address already in use".
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	low, high := unrequestedPorts(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	// Outgoing connections take their local ports from the ephemeral range, as a listener on port 0 does.
	for range 200 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, local, _ := net.SplitHostPort(c.LocalAddr().String())
		n, _ := strconv.Atoi(local)
		if n >= low && n <= high {
			t.Fatalf("an outgoing connection took local port %d, inside FreePort's range %d-%d", n, low, high)
		}
		_ = c.Close()
	}
	for range 200 {
		p := FreePort(t)
		if p < low || p > high {
			t.Fatalf("FreePort gave %d, outside its range %d-%d", p, low, high)
		}
	}
}
