package libvirtconn

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

const (
	procStorageVolDownload = 209
	packetStatusError      = 1
	packetStatusContinue   = 2
)

// statusPacket is packet with a status of its own.
func statusPacket(procedure, typ, serial, status uint32, body []byte) []byte {
	p := packet(procedure, typ, serial, body)
	binary.BigEndian.PutUint32(p[24:28], status)
	return p
}

// remoteError is the body of an error reply (remote_error in src/remote/remote_protocol.x), as far as
// go-libvirt reads it: code, domain, the message (a present pointer, then the string), level.
func remoteError(code uint32, message string) []byte {
	b := binary.BigEndian.AppendUint32(nil, code)
	b = binary.BigEndian.AppendUint32(b, 18) // VIR_FROM_STORAGE
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(message)))
	b = append(b, message...)
	b = append(b, make([]byte, (4-len(message)%4)%4)...)
	return binary.BigEndian.AppendUint32(b, 2) // VIR_ERR_ERROR
}

// serveDownloads answers the handshake, then each volume download with the packets order makes of the call's
// serial, in that order.
func serveDownloads(order func(serial uint32) [][]byte) func(net.Conn) {
	return func(c net.Conn) {
		defer func() { _ = c.Close() }()
		for {
			head := make([]byte, packetLengthAndHeader)
			if _, err := io.ReadFull(c, head); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, c, int64(packetLength(head)-packetLengthAndHeader)); err != nil {
				return
			}
			procedure, serial := binary.BigEndian.Uint32(head[12:16]), packetSerial(head)
			var out [][]byte
			switch procedure {
			case procStorageVolDownload:
				out = order(serial)
			case procConnectOpen:
				out = [][]byte{packet(procedure, packetTypeReply, serial, nil)}
			default: // the auth list: one type, none
				out = [][]byte{packet(procedure, packetTypeReply, serial, []byte{0, 0, 0, 1, 0, 0, 0, 0})}
			}
			if _, err := c.Write(bytes.Join(out, nil)); err != nil {
				return
			}
		}
	}
}

// TestDownloadWhoseDataComesBeforeItsReply: libvirtd sometimes sends a download's data before its reply to the
// call. The session reads the data all the same, and its next call is answered: go-libvirt, given the packets
// as they came, returned an empty download and then hung every call on the connection.
func TestDownloadWhoseDataComesBeforeItsReply(t *testing.T) {
	seed := []byte(strings.Repeat("cidata ", 10000))
	data := func(s uint32) []byte {
		return statusPacket(procStorageVolDownload, packetTypeStream, s, packetStatusContinue, seed)
	}
	reply := func(s uint32) []byte { return packet(procStorageVolDownload, packetTypeReply, s, nil) }
	end := func(s uint32) []byte {
		return statusPacket(procStorageVolDownload, packetTypeStream, s, packetStatusContinue, nil)
	}
	refusal := func(s uint32) []byte {
		return statusPacket(procStorageVolDownload, packetTypeReply, s, packetStatusError, remoteError(55, "Requested operation is not valid"))
	}
	for name, tc := range map[string]struct {
		packets     func(serial uint32) [][]byte
		wantRefused bool
	}{
		"in the protocol's order":             {packets: func(s uint32) [][]byte { return [][]byte{reply(s), data(s), end(s)} }},
		"data before the reply":               {packets: func(s uint32) [][]byte { return [][]byte{data(s), reply(s), end(s)} }},
		"data and its end before the reply":   {packets: func(s uint32) [][]byte { return [][]byte{data(s), end(s), reply(s)} }},
		"data before a refusal, then its end": {packets: func(s uint32) [][]byte { return [][]byte{data(s), refusal(s), end(s)} }, wantRefused: true},
		"data and its end before a refusal":   {packets: func(s uint32) [][]byte { return [][]byte{data(s), end(s), refusal(s)} }, wantRefused: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := Dial(ctx, Endpoint{Transport: "unix", Socket: serveSocket(t, serveDownloads(tc.packets)), Name: "qemu:///system"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Two downloads, one after the other: the second shows the first left the connection usable.
			for round := range 2 {
				var got bytes.Buffer
				done := make(chan error, 1)
				go func() { done <- s.API.StorageVolDownload(libvirt.StorageVol{Name: "seed"}, &got, 0, 1<<20, 0) }()
				select {
				case err = <-done:
				case <-ctx.Done():
					t.Fatalf("download %d still unanswered after a minute: the connection hangs", round+1)
				}
				switch {
				case tc.wantRefused && !strings.Contains(fmt.Sprint(err), "not valid"):
					t.Fatalf("download %d = %d bytes, %v; want the daemon's refusal", round+1, got.Len(), err)
				case !tc.wantRefused && (err != nil || !bytes.Equal(got.Bytes(), seed)):
					t.Fatalf("download %d = %d bytes, %v; want the %d bytes sent", round+1, got.Len(), err, len(seed))
				}
			}
		})
	}
}
