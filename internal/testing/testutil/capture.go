package testutil

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Capture is tcpdump recording what an interface carries, so that a test can read the bytes each side of a
// TCP connection put on the wire. Tests use it to prove what a network observer could and could not see.
type Capture struct {
	pcap, stderr *LockedBuffer
	exited       chan struct{}
}

// StartCapture runs tcpdump on iface with the filter given, prefixed by prefix (e.g. `ip netns exec NS`, to
// capture inside a network namespace), and returns once tcpdump says it is listening: from then on every
// packet is in the capture. tcpdump stops when the test ends.
func StartCapture(t testing.TB, prefix []string, iface, filter string) *Capture {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Fatal("tcpdump is not installed: scripts/install-deps.sh (make deps) installs it")
	}
	// -U and --immediate-mode hand each packet to the pipe as it arrives, so the test can read a connection
	// while tcpdump still runs; -s 0 keeps whole packets.
	args := append(slices.Clone(prefix), "tcpdump", "-n", "-s", "0", "-U", "--immediate-mode", "-i", iface, "-w", "-", filter)
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec // the test's own arguments
	c := &Capture{pcap: &LockedBuffer{}, stderr: &LockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.pcap, c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting tcpdump: %v", err)
	}
	// How it exited shows in its stderr, which the failures below report.
	go func() { _ = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-c.exited })
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(c.stderr.String(), "listening on") {
		select {
		case <-c.exited:
			t.Fatalf("tcpdump %s exited before listening:\n%s", strings.Join(args, " "), c.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump %s did not start listening within a minute:\n%s", strings.Join(args, " "), c.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// Raw is the capture file as tcpdump wrote it so far: every captured byte, headers included.
func (c *Capture) Raw() []byte { return []byte(c.pcap.String()) }

// Readable lists the secrets that occur in b. Secrets given in lower case are found in any letter case (HTTP
// header names are case-insensitive); others only as they are.
func Readable(b []byte, secrets [][]byte) [][]byte {
	var found [][]byte
	lower := bytes.ToLower(b)
	for _, s := range secrets {
		if bytes.Contains(b, s) || (bytes.Equal(s, bytes.ToLower(s)) && bytes.Contains(lower, s)) {
			found = append(found, s)
		}
	}
	return found
}

// TCPConn is one TCP connection seen from its first SYN: what the side that opened it sent, and what the other
// side answered, each in order, without retransmissions.
type TCPConn struct {
	Client, Server           netip.AddrPort
	ClientBytes, ServerBytes []byte
	// Closed: both sides sent FIN, or one sent RST; nothing more will be said on it.
	Closed bool
}

// WaitConns waits until at least n connections to serverPort were seen from their SYN and both sides of each
// have closed, and returns those connections. Only a closed connection is complete: until then a byte it
// sends later would be missed.
func (c *Capture) WaitConns(t testing.TB, serverPort uint16, n int, timeout time.Duration) []TCPConn {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		conns, err := c.Conns(serverPort)
		if err != nil {
			t.Fatalf("reading the capture: %v", err)
		}
		closed := 0
		for _, cn := range conns {
			if cn.Closed {
				closed++
			}
		}
		if closed >= n && closed == len(conns) {
			return conns
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the capture holds %d connection(s) to port %d, %d of them closed; want %d, all closed\n%s",
				timeout, len(conns), serverPort, closed, n, c.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Conns reassembles the TCP connections to serverPort in the capture so far. A connection whose SYN was not
// captured is left out (its beginning is missing); one with a hole in its bytes is an error, since what a test
// looks for could be in the hole.
func (c *Capture) Conns(serverPort uint16) ([]TCPConn, error) {
	segs, err := parsePcap(c.Raw())
	if err != nil {
		return nil, err
	}
	flows := map[[2]netip.AddrPort]*flow{}
	var order [][2]netip.AddrPort
	for _, s := range segs {
		k := [2]netip.AddrPort{s.from, s.to}
		f := flows[k]
		if f == nil {
			f = &flow{}
			flows[k] = f
			order = append(order, k)
		}
		f.add(s)
	}
	var conns []TCPConn
	for _, k := range order {
		if k[1].Port() != serverPort {
			continue
		}
		out, back := flows[k], flows[[2]netip.AddrPort{k[1], k[0]}]
		if !out.synSeen {
			continue
		}
		cn := TCPConn{Client: k[0], Server: k[1], Closed: out.rst}
		var err error
		if cn.ClientBytes, err = out.bytes(); err != nil {
			return nil, fmt.Errorf("%s -> %s: %w", k[0], k[1], err)
		}
		if back != nil {
			cn.Closed = cn.Closed || back.rst || (out.fin && back.fin)
			if cn.ServerBytes, err = back.bytes(); err != nil {
				return nil, fmt.Errorf("%s -> %s: %w", k[1], k[0], err)
			}
		}
		conns = append(conns, cn)
	}
	return conns, nil
}

// segment is one TCP packet: its addresses, sequence number, flags and payload.
type segment struct {
	from, to      netip.AddrPort
	seq           uint32
	syn, fin, rst bool
	payload       []byte
}

// flow is one direction of a connection.
type flow struct {
	synSeen, fin, rst bool
	isn               uint32 // the SYN's sequence number; data starts at isn+1
	segs              []segment
}

func (f *flow) add(s segment) {
	if s.syn {
		f.synSeen, f.isn = true, s.seq
	}
	f.fin = f.fin || s.fin
	f.rst = f.rst || s.rst
	if len(s.payload) > 0 {
		f.segs = append(f.segs, s)
	}
}

// bytes puts the payloads in sequence order, dropping what retransmissions repeat. Offsets are taken relative
// to the SYN, so a sequence number that wraps around 2^32 still sorts right.
func (f *flow) bytes() ([]byte, error) {
	type piece struct {
		off  uint32
		data []byte
	}
	pieces := make([]piece, 0, len(f.segs))
	for _, s := range f.segs {
		pieces = append(pieces, piece{off: s.seq - f.isn - 1, data: s.payload})
	}
	slices.SortStableFunc(pieces, func(a, b piece) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	var out []byte
	for _, p := range pieces {
		next := uint32(len(out))           //nolint:gosec // a test's connection carries far less than 4 GiB
		end := p.off + uint32(len(p.data)) //nolint:gosec // one packet
		switch {
		case p.off > next:
			return nil, fmt.Errorf("bytes %d to %d were not captured", next, p.off)
		case end <= next:
			continue // a retransmission of what is there already
		}
		out = append(out, p.data[next-p.off:]...)
	}
	return out, nil
}

// Link types of the pcap format (tcpdump's DLT_ values) this reader understands.
const (
	linkEthernet = 1   // Ethernet, also what Linux gives for loopback and bridges
	linkLinuxSLL = 113 // Linux "cooked" capture, what -i any gives
)

// parsePcap reads the TCP segments of a pcap stream, in capture order. A packet cut short at the end of the
// stream (tcpdump still writing it) ends the reading without an error.
func parsePcap(b []byte) ([]segment, error) {
	if len(b) < 24 {
		return nil, nil
	}
	var order binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		order = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		order = binary.BigEndian
	default:
		return nil, errors.New("not a pcap stream")
	}
	link := order.Uint32(b[20:])
	var segs []segment
	for rest := b[24:]; len(rest) >= 16; {
		capLen := int(order.Uint32(rest[8:]))
		if len(rest) < 16+capLen {
			break
		}
		frame := rest[16 : 16+capLen]
		rest = rest[16+capLen:]
		var etherType uint16
		switch link {
		case linkEthernet:
			if len(frame) < 14 {
				continue
			}
			etherType, frame = binary.BigEndian.Uint16(frame[12:]), frame[14:]
		case linkLinuxSLL:
			if len(frame) < 16 {
				continue
			}
			etherType, frame = binary.BigEndian.Uint16(frame[14:]), frame[16:]
		default:
			return nil, fmt.Errorf("pcap link type %d is not one this reader knows", link)
		}
		if s, ok := parseIP(etherType, frame); ok {
			segs = append(segs, s)
		}
	}
	return segs, nil
}

// parseIP reads the TCP segment in an IPv4 or IPv6 packet; ok is false for anything else.
func parseIP(etherType uint16, p []byte) (segment, bool) {
	var src, dst netip.Addr
	var tcp []byte
	switch etherType {
	case 0x0800:
		if len(p) < 20 || p[9] != 6 {
			return segment{}, false
		}
		hl, total := int(p[0]&0x0f)*4, int(binary.BigEndian.Uint16(p[2:]))
		// The total length, not the frame's, bounds the packet: short Ethernet frames carry padding.
		if hl < 20 || total < hl || len(p) < total {
			return segment{}, false
		}
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		tcp = p[hl:total]
	case 0x86dd:
		// Only TCP directly after the fixed header: the tests' traffic carries no extension headers.
		if len(p) < 40 || p[6] != 6 {
			return segment{}, false
		}
		plen := int(binary.BigEndian.Uint16(p[4:]))
		if len(p) < 40+plen {
			return segment{}, false
		}
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		tcp = p[40 : 40+plen]
	default:
		return segment{}, false
	}
	if len(tcp) < 20 {
		return segment{}, false
	}
	off := int(tcp[12]>>4) * 4
	if off < 20 || len(tcp) < off {
		return segment{}, false
	}
	flags := tcp[13]
	return segment{
		from:    netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:])),
		to:      netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:])),
		seq:     binary.BigEndian.Uint32(tcp[4:]),
		fin:     flags&0x01 != 0,
		syn:     flags&0x02 != 0,
		rst:     flags&0x04 != 0,
		payload: bytes.Clone(tcp[off:]),
	}, true
}
