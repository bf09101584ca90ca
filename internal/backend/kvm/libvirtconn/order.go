package libvirtconn

import (
	"encoding/binary"
	"sync"
)

// libvirtd sometimes sends a volume download's first data packet before its reply to the call: the stream's
// data is queued by the daemon's event loop, the reply by the worker thread that ran the call, and either may
// reach the socket first. go-libvirt assumes the protocol's order (reply, then stream packets). Given the data
// first, it takes that packet as the reply, the reply (status OK) as the stream's end, and returns with
// nothing written; libvirtd's last, empty stream packet then finds the call gone and blocks go-libvirt's reader
// for good while it holds the lock every later call needs (go-libvirt issue 241 describes that lock). Seen in a
// packet trace of the kvm backend's live tests, about one download in forty under the race detector: the
// seed read came back empty, and the connection hung until the pool's stall guard closed it 30 s later.
//
// packetOrder restores the protocol's order on the way in: a stream packet for a call whose reply has not been
// read yet is held, and handed on right after that reply; after an error reply it is dropped (go-libvirt has
// returned the error and stopped listening, and one more packet would block its reader the same way), as is one
// that comes after an error reply.

// Packet types and statuses of libvirt's RPC protocol (src/rpc/virnetprotocol.x).
const (
	packetTypeCall   = 0
	packetTypeStream = 3
	packetStatusOK   = 0
)

// packetOrder follows the packets a connection writes and reads. Write and Read run on different goroutines
// (go-libvirt's callers and its reader), so what they share is under mu.
type packetOrder struct {
	mu sync.Mutex
	// awaiting holds the serials of calls written whose reply has not been read.
	awaiting map[uint32]bool

	written headerReader // the write side's packets, followed only as far as their headers

	// The read side, touched only by the reader's goroutine.
	reading []byte              // the packet being read, as far as read
	held    map[uint32][][]byte // stream packets that came before their call's reply
	refused map[uint32]bool     // calls answered with an error lately (refusedWindow), whose stream packets are dropped
	ready   []byte              // bytes in the protocol's order, not yet handed to the reader
}

func newPacketOrder() *packetOrder {
	return &packetOrder{awaiting: map[uint32]bool{}, held: map[uint32][][]byte{}, refused: map[uint32]bool{}}
}

// refusedWindow is how many serials back a refusal is remembered. A stray stream packet of a refused call
// comes right after the refusal; every call's error reply is noted, so the map has to forget.
const refusedWindow = 64

// header fields, from a packet's first packetLengthAndHeader bytes.
func packetLength(h []byte) int    { return int(binary.BigEndian.Uint32(h[0:4])) }
func packetType(h []byte) uint32   { return binary.BigEndian.Uint32(h[16:20]) }
func packetSerial(h []byte) uint32 { return binary.BigEndian.Uint32(h[20:24]) }
func packetStatus(h []byte) uint32 { return binary.BigEndian.Uint32(h[24:28]) }

// sent notes the calls among bytes about to be written. It runs before the bytes reach the socket, so a call
// is awaiting before its reply can arrive.
func (o *packetOrder) sent(b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.written.consume(b, func(h []byte) {
		if packetType(h) == packetTypeCall {
			o.awaiting[packetSerial(h)] = true
		}
	})
}

// received takes bytes read from the socket and adds whole packets to ready, in the protocol's order.
func (o *packetOrder) received(b []byte) {
	for len(b) > 0 {
		if len(o.reading) < packetLengthAndHeader {
			k := min(packetLengthAndHeader-len(o.reading), len(b))
			o.reading = append(o.reading, b[:k]...)
			b = b[k:]
			if len(o.reading) < packetLengthAndHeader {
				return
			}
		}
		k := min(max(0, packetLength(o.reading)-len(o.reading)), len(b))
		o.reading = append(o.reading, b[:k]...)
		b = b[k:]
		if len(o.reading) < packetLength(o.reading) {
			return
		}
		o.route(o.reading)
		o.reading = nil
	}
}

func (o *packetOrder) route(p []byte) {
	serial := packetSerial(p)
	o.mu.Lock()
	awaiting := o.awaiting[serial]
	if packetType(p) == packetTypeReply {
		delete(o.awaiting, serial)
	}
	o.mu.Unlock()
	switch {
	case packetType(p) == packetTypeStream && awaiting:
		o.held[serial] = append(o.held[serial], p)
	case packetType(p) == packetTypeStream && o.refused[serial]:
		// dropped: nobody listens for it
	case packetType(p) == packetTypeReply:
		o.ready = append(o.ready, p...)
		if packetStatus(p) == packetStatusOK {
			for _, early := range o.held[serial] {
				o.ready = append(o.ready, early...)
			}
		} else {
			o.refused[serial] = true
			for s := range o.refused {
				if serial-s > refusedWindow {
					delete(o.refused, s)
				}
			}
		}
		delete(o.held, serial)
	default:
		o.ready = append(o.ready, p...)
	}
}

// take moves up to len(b) ready bytes into b.
func (o *packetOrder) take(b []byte) int {
	n := copy(b, o.ready)
	o.ready = o.ready[n:]
	if len(o.ready) == 0 {
		o.ready = nil // let the array of a large packet go
	}
	return n
}

// headerReader follows a byte stream's packets and hands each packet's length and header to a function once
// the packet has been read whole; it keeps no body.
type headerReader struct {
	header    []byte // the current packet's length and header, as far as read
	remaining int    // bytes of the current packet after its header still to pass
}

func (h *headerReader) consume(b []byte, onPacket func(header []byte)) {
	for len(b) > 0 {
		if len(h.header) < packetLengthAndHeader {
			k := min(packetLengthAndHeader-len(h.header), len(b))
			h.header = append(h.header, b[:k]...)
			b = b[k:]
			if len(h.header) < packetLengthAndHeader {
				return
			}
			h.remaining = max(0, packetLength(h.header)-packetLengthAndHeader)
		}
		k := min(h.remaining, len(b))
		h.remaining -= k
		b = b[k:]
		if h.remaining > 0 {
			return
		}
		onPacket(h.header)
		h.header = h.header[:0]
	}
}
