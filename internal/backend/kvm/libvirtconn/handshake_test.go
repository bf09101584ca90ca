package libvirtconn

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// packet is one libvirt RPC packet: length, header (program, version, procedure, type, serial, status), body.
func packet(procedure, typ, serial uint32, body []byte) []byte {
	b := make([]byte, packetLengthAndHeader, packetLengthAndHeader+len(body))
	for i, v := range []uint32{uint32(packetLengthAndHeader + len(body)), remoteProgram, 1, procedure, typ, serial, 0} {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return append(b, body...)
}

func TestHandshakeReaderFindsTheWholeConnectOpenReply(t *testing.T) {
	authList := packet(66, packetTypeReply, 1, []byte{0, 0, 0, 1, 0, 0, 0, 0})
	openReply := packet(procConnectOpen, packetTypeReply, 2, nil)
	openCall := packet(procConnectOpen, 0, 2, []byte{0, 0, 0, 0})
	for name, tc := range map[string]struct {
		stream []byte
		chunk  int
		want   bool
	}{
		"auth list and open reply at once":         {append(append([]byte{}, authList...), openReply...), 1 << 10, true},
		"byte by byte":                             {append(append([]byte{}, authList...), openReply...), 1, true},
		"in chunks that split headers":             {append(append([]byte{}, authList...), openReply...), 7, true},
		"the auth list reply alone":                {authList, 1 << 10, false},
		"open reply short of its last header byte": {append(append([]byte{}, authList...), openReply[:len(openReply)-1]...), 3, false},
		"a call of ConnectOpen is no reply":        {openCall, 1 << 10, false},
	} {
		t.Run(name, func(t *testing.T) {
			var h handshakeReader
			for b := tc.stream; len(b) > 0; {
				k := min(tc.chunk, len(b))
				h.consume(b[:k])
				b = b[k:]
			}
			if h.opened != tc.want {
				t.Errorf("opened = %v, want %v", h.opened, tc.want)
			}
		})
	}
}

// A daemon that drops the connection right after its reply to ConnectOpen: Dial returns a session whose Lost
// closes, and under the race detector go-libvirt's disconnect watcher does not race ConnectToURI (it did: go-libvirt
// issue 167, seen in make test's kvm acceptance tests under random connection cuts).
func TestDialSurvivesADropRightAfterTheHandshake(t *testing.T) {
	socket := serveSocket(t, serveHandshakeThenDrop)
	const rounds = 20
	for i := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, err := Dial(ctx, Endpoint{Transport: "unix", Socket: socket, Name: "qemu:///system"})
		cancel()
		if err != nil {
			t.Fatalf("round %d: Dial: %v", i, err)
		}
		<-s.Lost
		s.Close()
	}
}

// serveHandshakeThenDrop answers AuthList (no authentication) and ConnectOpen on c, then closes it.
func serveHandshakeThenDrop(c net.Conn) {
	defer func() { _ = c.Close() }()
	for {
		head := make([]byte, packetLengthAndHeader)
		if _, err := io.ReadFull(c, head); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[0:4])-packetLengthAndHeader)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		procedure, serial := binary.BigEndian.Uint32(head[12:16]), binary.BigEndian.Uint32(head[20:24])
		var reply []byte
		if procedure != procConnectOpen {
			reply = []byte{0, 0, 0, 1, 0, 0, 0, 0} // one authentication type: none
		}
		if _, err := c.Write(packet(procedure, packetTypeReply, serial, reply)); err != nil {
			return
		}
		if procedure == procConnectOpen {
			return
		}
	}
}
