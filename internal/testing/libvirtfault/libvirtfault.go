// Package libvirtfault is a fault injector for tests: a proxy on a unix socket in front of a libvirt daemon's
// socket that reads libvirt's RPC framing and cuts the connection at a chosen call, before the call reaches
// the daemon or after the daemon answered it but before the answer reaches the client, or after a random
// lifetime. It counts every call that passes, so a test can first learn how many calls an operation makes and
// then cut at each of them in turn.
//
// Only tests import it. It lives outside the kvm package because the provider's acceptance tests put it in
// front of the daemon too.
package libvirtfault

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Position is where a cut happens relative to the call it is armed for.
type Position int

const (
	// BeforeCall drops the connection instead of sending the call: the daemon never sees it.
	BeforeCall Position = iota + 1
	// BeforeReply sends the call, lets the daemon carry it out and drops the connection instead of passing
	// its reply on: the client cannot know the call took effect.
	BeforeReply
	// Lifetime is a cut made because the connection's random lifetime ended.
	Lifetime
)

func (p Position) String() string {
	switch p {
	case 0:
		return "none"
	case BeforeCall:
		return "before call"
	case BeforeReply:
		return "before reply"
	case Lifetime:
		return "lifetime"
	}
	return fmt.Sprintf("Position(%d)", int(p))
}

// The RPC header (libvirt's virNetMessageHeader): program, version, procedure, type, serial, status, each
// four bytes big-endian, after the packet's own four-byte length (which counts itself).
const (
	lenSize    = 4
	headerSize = 24
	// maxPacket bounds a packet's length: libvirt's own limit is 32 MiB of payload plus the header.
	maxPacket = 32<<20 + 1024

	typeCall         = 0
	typeReply        = 1
	typeCallWithFDs  = 4
	typeReplyWithFDs = 5

	programRemote = 0x20008086
	programQEMU   = 0x20008087
)

// header is the part of a packet the proxy reads.
type header struct {
	program   uint32
	procedure int32
	typ       int32
	serial    uint32
}

// Call is one call the proxy passed on or cut.
type Call struct {
	// N counts calls since the last Reset, from 1.
	N int
	// Conn numbers the client connections since the proxy started, from 1.
	Conn      int
	Program   uint32
	Procedure int32
}

// Name is the procedure's name as libvirt's protocol files spell it, or its number for those this project
// never calls.
func (c Call) Name() string {
	table := remoteProcs
	if c.Program == programQEMU {
		table = qemuProcs
	}
	if n, ok := table[c.Procedure]; ok {
		return n
	}
	return fmt.Sprintf("proc %d/%#x", c.Procedure, c.Program)
}

// Cut is one connection the proxy cut, and the call it cut it at (zero for a lifetime cut between calls).
type Cut struct {
	Call     Call
	Position Position
}

// Proxy forwards client connections on its socket to the daemon's socket.
type Proxy struct {
	socket, upstream string
	ln               net.Listener
	wg               sync.WaitGroup

	mu        sync.Mutex
	connSeq   int
	calls     []Call
	armedAt   int
	armedPos  Position
	cuts      []Cut
	live      map[*pair]bool
	rng       *rand.Rand
	minLife   time.Duration
	maxLife   time.Duration
	closed    bool
	lastError error
}

// Start listens on a new socket in dir and forwards every connection to upstream.
func Start(dir, upstream string) (*Proxy, error) {
	socket := filepath.Join(dir, "libvirt-fault.sock")
	_ = os.Remove(socket) // a socket file left by an earlier run in the same dir would refuse the bind
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	p := &Proxy{socket: socket, upstream: upstream, ln: ln, live: map[*pair]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Socket is the path clients connect to.
func (p *Proxy) Socket() string { return p.socket }

// Reset forgets the calls and cuts so far and disarms the proxy: counting starts again from 1.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls, p.cuts, p.armedAt, p.armedPos = nil, nil, 0, 0
}

// CutAt arms the proxy to cut the connection at the k-th call counted from the last Reset, once.
func (p *Proxy) CutAt(k int, pos Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armedAt, p.armedPos = k, pos
}

// RandomLifetimes makes every connection opened from now on live for a time drawn uniformly from [min, max)
// by a generator seeded with seed, then cut. The same seed and the same sequence of connections give the
// same lifetimes, so a failure can be replayed. A zero max turns it off.
func (p *Proxy) RandomLifetimes(seed uint64, minLife, maxLife time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p.minLife, p.maxLife = minLife, maxLife
}

// Calls returns the calls counted since the last Reset, in the order they reached the proxy.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

// Cuts returns the cuts made since the last Reset.
func (p *Proxy) Cuts() []Cut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Cut(nil), p.cuts...)
}

// Err is the last framing error the proxy met: a packet it could not read as libvirt's. A test that
// expects clean traffic checks it is nil.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastError
}

// Close stops accepting, cuts every open connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	live := make([]*pair, 0, len(p.live))
	for c := range p.live {
		live = append(live, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range live {
		c.close()
	}
	p.wg.Wait()
	_ = os.Remove(p.socket)
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("unix", p.upstream)
		if err != nil {
			// The daemon is away (restarting): the client sees its connection end, as it would have seen
			// the daemon's socket refuse it.
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = up.Close()
			return
		}
		p.connSeq++
		c := &pair{p: p, id: p.connSeq, client: client, up: up}
		p.live[c] = true
		var life time.Duration
		if p.rng != nil && p.maxLife > 0 {
			life = p.minLife + time.Duration(p.rng.Int64N(int64(p.maxLife-p.minLife)+1))
		}
		p.mu.Unlock()
		if life > 0 {
			c.mu.Lock() // the timer may fire before AfterFunc returns
			c.timer = time.AfterFunc(life, func() { c.cut(Cut{Position: Lifetime}) })
			c.mu.Unlock()
		}
		p.wg.Add(2)
		go c.pumpCalls()
		go c.pumpReplies()
	}
}

// pair is one client connection and the daemon connection it is forwarded to.
type pair struct {
	p          *Proxy
	id         int
	client, up net.Conn
	timer      *time.Timer

	mu      sync.Mutex
	pending map[uint32]Call // calls sent whose reply is to be dropped
	done    bool
}

func (c *pair) close() {
	c.mu.Lock()
	c.done = true
	timer := c.timer
	c.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	_ = c.client.Close()
	_ = c.up.Close()
	c.p.mu.Lock()
	delete(c.p.live, c)
	c.p.mu.Unlock()
}

// cut records why the connection ends and ends it; a connection already ended is not cut twice.
func (c *pair) cut(why Cut) {
	c.mu.Lock()
	already := c.done
	c.mu.Unlock()
	if already {
		return
	}
	c.p.mu.Lock()
	c.p.cuts = append(c.p.cuts, why)
	c.p.mu.Unlock()
	c.close()
}

// pumpCalls carries the client's packets to the daemon, counting calls and cutting where armed.
func (c *pair) pumpCalls() {
	defer c.p.wg.Done()
	defer c.close()
	for {
		pkt, h, err := readPacket(c.client)
		if err != nil {
			c.p.noteErr(err)
			return
		}
		if h.typ == typeCall || h.typ == typeCallWithFDs {
			call, pos := c.p.count(c.id, h)
			switch pos {
			case BeforeCall:
				c.cut(Cut{Call: call, Position: BeforeCall})
				return
			case BeforeReply:
				c.mu.Lock()
				if c.pending == nil {
					c.pending = map[uint32]Call{}
				}
				c.pending[h.serial] = call
				c.mu.Unlock()
			}
		}
		if _, err := c.up.Write(pkt); err != nil {
			return
		}
	}
}

// pumpReplies carries the daemon's packets to the client, dropping the connection at an armed reply.
func (c *pair) pumpReplies() {
	defer c.p.wg.Done()
	defer c.close()
	for {
		pkt, h, err := readPacket(c.up)
		if err != nil {
			c.p.noteErr(err)
			return
		}
		if h.typ == typeReply || h.typ == typeReplyWithFDs {
			c.mu.Lock()
			call, armed := c.pending[h.serial]
			c.mu.Unlock()
			if armed {
				c.cut(Cut{Call: call, Position: BeforeReply})
				return
			}
		}
		if _, err := c.client.Write(pkt); err != nil {
			return
		}
	}
}

// count numbers a call and says whether the proxy is armed for it.
func (p *Proxy) count(conn int, h header) (Call, Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call := Call{N: len(p.calls) + 1, Conn: conn, Program: h.program, Procedure: h.procedure}
	p.calls = append(p.calls, call)
	if p.armedAt == call.N {
		pos := p.armedPos
		p.armedAt, p.armedPos = 0, 0
		return call, pos
	}
	return call, 0
}

// noteErr keeps framing errors; the ends of a connection (EOF, a closed socket) are not errors.
func (p *Proxy) noteErr(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) {
		return
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return // reset by the peer, or read on a socket the other pump closed
	}
	p.mu.Lock()
	p.lastError = err
	p.mu.Unlock()
}

// errFraming is a packet that cannot be libvirt's.
var errFraming = errors.New("libvirtfault: not a libvirt RPC packet")

// readPacket reads one whole packet and decodes its header.
func readPacket(r io.Reader) ([]byte, header, error) {
	var lb [lenSize]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, header{}, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n < lenSize+headerSize || n > maxPacket {
		return nil, header{}, fmt.Errorf("%w: length %d", errFraming, n)
	}
	pkt := make([]byte, n)
	copy(pkt, lb[:])
	if _, err := io.ReadFull(r, pkt[lenSize:]); err != nil {
		return nil, header{}, err
	}
	b := pkt[lenSize:]
	h := header{
		program:   binary.BigEndian.Uint32(b[0:]),
		procedure: int32(binary.BigEndian.Uint32(b[8:])),
		typ:       int32(binary.BigEndian.Uint32(b[12:])),
		serial:    binary.BigEndian.Uint32(b[16:]),
	}
	return pkt, h, nil
}
