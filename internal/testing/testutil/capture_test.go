package testutil

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestFlowBytes(t *testing.T) {
	t.Parallel()
	seg := func(off uint32, data string) segment { return segment{payload: []byte(data), seq: off} }
	tests := map[string]struct {
		isn     uint32
		segs    []segment // seq given as an offset from isn+1
		want    string
		wantErr bool
	}{
		"in order":           {segs: []segment{seg(0, "GET "), seg(4, "/ HTTP/1.1")}, want: "GET / HTTP/1.1"},
		"out of order":       {segs: []segment{seg(4, "/ HTTP/1.1"), seg(0, "GET ")}, want: "GET / HTTP/1.1"},
		"retransmitted":      {segs: []segment{seg(0, "GET "), seg(0, "GET "), seg(4, "/")}, want: "GET /"},
		"overlapping":        {segs: []segment{seg(0, "GET "), seg(2, "T /x")}, want: "GET /x"},
		"sequence wraps":     {isn: 0xfffffffd, segs: []segment{seg(0, "abcd"), seg(4, "efgh")}, want: "abcdefgh"},
		"a hole is an error": {segs: []segment{seg(0, "GET "), seg(6, "HTTP")}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &flow{}
			f.add(segment{syn: true, seq: tc.isn})
			for _, s := range tc.segs {
				s.seq += tc.isn + 1
				f.add(s)
			}
			got, err := f.bytes()
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadable(t *testing.T) {
	t.Parallel()
	secrets := [][]byte{[]byte("proxy-authorization"), []byte("Pa55word")}
	tests := map[string]struct {
		in   string
		want int
	}{
		"header as curl writes it": {"Proxy-Authorization: Basic x", 1},
		"header in upper case":     {"PROXY-AUTHORIZATION: x", 1},
		"password as it is":        {"user:Pa55word", 1},
		"password in another case": {"user:pa55word", 0},
		"both":                     {"proxy-authorization: Pa55word", 2},
		"neither":                  {"\x16\x03\x01 random bytes", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := Readable([]byte(tc.in), secrets); len(got) != tc.want {
				t.Errorf("found %q, want %d secret(s)", got, tc.want)
			}
		})
	}
}

// TestParsePcap reads a capture of one Ethernet frame padded past its IPv4 packet: the padding is not payload.
func TestParsePcap(t *testing.T) {
	t.Parallel()
	ip := make([]byte, 20)
	ip[0], ip[9] = 0x45, 6
	copy(ip[12:], []byte{10, 0, 0, 1})
	copy(ip[16:], []byte{10, 0, 0, 2})
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 3128)
	binary.BigEndian.PutUint32(tcp[4:], 7)
	tcp[12], tcp[13] = 5<<4, 0x01 // FIN
	pkt := bytes.Join([][]byte{ip, tcp, []byte("hi")}, nil)
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt))) //nolint:gosec // 42 bytes
	frame := append(append(make([]byte, 12), 0x08, 0x00), pkt...)
	frame = append(frame, make([]byte, 10)...) // Ethernet padding
	var file bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr, 0xa1b2c3d4)
	binary.LittleEndian.PutUint32(hdr[20:], linkEthernet)
	file.Write(hdr)
	rec := make([]byte, 16)
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(frame)))  //nolint:gosec // one frame
	binary.LittleEndian.PutUint32(rec[12:], uint32(len(frame))) //nolint:gosec // one frame
	file.Write(rec)
	file.Write(frame)
	file.Write(rec[:10]) // a record tcpdump is still writing

	segs, err := parsePcap(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := segment{from: netip.MustParseAddrPort("10.0.0.1:40000"), to: netip.MustParseAddrPort("10.0.0.2:3128"), seq: 7, fin: true, payload: []byte("hi")}
	if len(segs) != 1 || segs[0].from != want.from || segs[0].to != want.to || segs[0].seq != want.seq || !segs[0].fin || string(segs[0].payload) != "hi" {
		t.Errorf("got %+v, want [%+v]", segs, want)
	}
}
