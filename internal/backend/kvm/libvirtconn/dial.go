package libvirtconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Endpoint is one libvirt daemon and how to log in to it, as its URI and the host's settings say. File names
// left empty take the defaults virsh uses.
type Endpoint struct {
	Transport string // unix, tcp, tls or ssh
	Host      string // host name, no port; for ssh, what the ssh configuration's Host patterns match
	Port      string // for ssh, empty means the ssh configuration's Port, else 22
	User      string // for ssh; empty means the ssh configuration's User, else $USER
	Socket    string // the daemon's unix socket: local for unix, remote for ssh
	// Name is the URI sent in ConnectOpen: the daemon is local to itself, so the transport is dropped.
	Name string
	SSH  SSHLogin
	TLS  TLSLogin
}

// SSHLogin is how the ssh transport logs in, as OpenSSH would.
type SSHLogin struct {
	// KeyFile is the private key, tried before the ssh configuration's IdentityFile entries; with neither,
	// ~/.ssh/id_ed25519, id_ecdsa and id_rsa. The keys of the ssh-agent at SSH_AUTH_SOCK are offered first.
	KeyFile string
	// KnownHostsFile verifies the host key; empty means the configuration's UserKnownHostsFile, else
	// ~/.ssh/known_hosts.
	KnownHostsFile string
	// ConfigFile is the ssh client configuration, read as ssh -F reads it; empty means ~/.ssh/config, then
	// /etc/ssh/ssh_config; "none" means none.
	ConfigFile string
	// InsecureIgnoreHostKey skips verifying the libvirt host's key; jump hosts are verified all the same.
	InsecureIgnoreHostKey bool
}

// TLSLogin is the tls transport's certificates, in libvirt's PKI layout.
type TLSLogin struct {
	// PKIPath is a directory holding cacert.pem, clientcert.pem and clientkey.pem; empty means
	// /etc/pki/CA/cacert.pem, /etc/pki/libvirt/clientcert.pem and /etc/pki/libvirt/private/clientkey.pem.
	PKIPath string
	// Each file set here is used instead of its PKIPath one.
	CACertFile         string
	ClientCertFile     string
	ClientKeyFile      string
	InsecureSkipVerify bool
}

// Dial opens a session to the daemon at e: the transport, then libvirt's handshake (auth list, connect
// open), all within ctx.
func Dial(ctx context.Context, e Endpoint) (*Session, error) {
	nc, err := dialTransport(ctx, e)
	if err != nil {
		return nil, err
	}
	w := &watchedConn{Conn: nc, lost: make(chan struct{}), connectReturned: make(chan struct{}), order: newPacketOrder()}
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(w))
	done := make(chan error, 1)
	go func() {
		err := l.ConnectToURI(libvirt.ConnectURI(e.Name))
		close(w.connectReturned)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			_ = w.Close() // the handshake's error is the one worth reporting
			if re := w.readError(); tlsRefusal(re) {
				// go-libvirt reports the broken stream as an interrupted call; the read says why it broke.
				return nil, &ConfigError{fmt.Errorf("TLS handshake with %s: %w", e.Host, re)}
			}
			return nil, err
		}
	case <-ctx.Done():
		_ = w.Close() // ends the handshake's pending call; ctx's error is the one worth reporting
		return nil, ctx.Err()
	}
	// Closing drops the session: nothing is left to flush, so a close error has no use.
	return &Session{API: l, Lost: w.lost, Close: func() { _ = w.Close() }}, nil
}

// watchedConn notices a broken connection itself: go-libvirt's own Disconnected channel can miss a drop that
// happens during its handshake.
//
// It also keeps a drop right after the handshake from racing go-libvirt: ConnectToURI sets its disconnected
// channel after ConnectOpen's reply, while the goroutine it started at the connect reads that field as soon as
// a read fails (a data race the race detector reports, go-libvirt issue 167). So once ConnectOpen's whole reply
// has been read, a read error waits for ConnectToURI to return before go-libvirt sees it. Before that reply the
// error goes through at once: the handshake then fails, and ConnectToURI returns without setting the field.
//
// And it hands go-libvirt the packets in the protocol's order (packetOrder), which libvirtd does not always
// keep for a download.
type watchedConn struct {
	net.Conn
	once sync.Once
	lost chan struct{}
	// connectReturned is closed once ConnectToURI has returned.
	connectReturned chan struct{}
	// handshake follows the packets read until ConnectOpen's reply; only Read uses it.
	handshake handshakeReader
	order     *packetOrder
	// buf is what Read reads the socket into; readFail is the socket's read error, returned once every packet
	// read before it has been handed on. Only Read uses them.
	buf      []byte
	readFail error

	mu      sync.Mutex
	readErr error // the first read error, which says why the stream ended
}

func (w *watchedConn) Read(b []byte) (int, error) {
	for len(w.order.ready) == 0 && w.readFail == nil {
		if w.buf == nil {
			w.buf = make([]byte, 64<<10)
		}
		n, err := w.Conn.Read(w.buf)
		w.order.received(w.buf[:n])
		w.readFail = err
	}
	if n := w.order.take(b); n > 0 || len(b) == 0 {
		w.handshake.consume(b[:n])
		return n, nil
	}
	err := w.readFail
	w.mu.Lock()
	if w.readErr == nil {
		w.readErr = err
	}
	w.mu.Unlock()
	w.markLost()
	if w.handshake.opened {
		<-w.connectReturned
	}
	return 0, err
}

// The packet fields handshakeReader reads, from libvirt's remote protocol (src/rpc/virnetprotocol.x and
// src/remote/remote_protocol.x): every packet is a 4-byte length (itself included) and a header of program,
// version, procedure, type, serial and status, each 4 bytes, big-endian.
const (
	remoteProgram         = 0x20008086
	procConnectOpen       = 1
	packetTypeReply       = 1
	packetLengthAndHeader = 4 + 6*4
)

// handshakeReader follows the packets of a stream until the reply to ConnectOpen has been read whole, then
// sets opened and reads no further.
type handshakeReader struct {
	opened  bool
	packets headerReader
}

func (h *handshakeReader) consume(b []byte) {
	if h.opened {
		return
	}
	h.packets.consume(b, func(header []byte) {
		field := func(i int) uint32 { return binary.BigEndian.Uint32(header[4+4*i:]) }
		h.opened = h.opened || field(0) == remoteProgram && field(2) == procConnectOpen && field(3) == packetTypeReply
	})
}

func (w *watchedConn) readError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readErr
}

func (w *watchedConn) Write(b []byte) (int, error) {
	w.order.sent(b)
	n, err := w.Conn.Write(b)
	if err != nil {
		w.markLost()
	}
	return n, err
}

func (w *watchedConn) Close() error {
	w.markLost()
	return w.Conn.Close()
}

func (w *watchedConn) markLost() { w.once.Do(func() { close(w.lost) }) }

// dialTransport opens the byte stream to libvirtd that e describes. Every transport dials with ctx, so an
// unreachable host fails when the caller's deadline passes, not after the OS's TCP timeout.
func dialTransport(ctx context.Context, e Endpoint) (net.Conn, error) {
	var d net.Dialer
	switch e.Transport {
	case "unix":
		return d.DialContext(ctx, "unix", e.Socket)
	case "tcp":
		return d.DialContext(ctx, "tcp", net.JoinHostPort(e.Host, e.Port))
	case "tls":
		conf, err := tlsConfig(e)
		if err != nil {
			return nil, &ConfigError{err}
		}
		td := tls.Dialer{NetDialer: &d, Config: conf}
		c, err := td.DialContext(ctx, "tcp", net.JoinHostPort(e.Host, e.Port))
		if tlsRefusal(err) {
			return nil, &ConfigError{fmt.Errorf("TLS handshake with %s: %w", e.Host, err)}
		}
		return c, err
	case "ssh":
		return dialSSH(ctx, e)
	}
	return nil, &ConfigError{fmt.Errorf("transport %q is not supported", e.Transport)}
}

// tlsRefusal reports a certificate this client does not trust, or a server refusing this client's
// certificate (its alert arrives as a "remote error", with TLS 1.3 only at the first read): a login that
// cannot work as configured, which no retry helps.
func tlsRefusal(err error) bool {
	var cv *tls.CertificateVerificationError
	var oe *net.OpError
	return errors.As(err, &cv) || errors.As(err, &oe) && oe.Op == "remote error"
}

// tlsConfig follows libvirt's PKI layout, so hosts set up for virsh work unchanged.
func tlsConfig(e Endpoint) (*tls.Config, error) {
	ca, cert, key := "/etc/pki/CA/cacert.pem", "/etc/pki/libvirt/clientcert.pem", "/etc/pki/libvirt/private/clientkey.pem"
	if dir := e.TLS.PKIPath; dir != "" {
		ca, cert, key = filepath.Join(dir, "cacert.pem"), filepath.Join(dir, "clientcert.pem"), filepath.Join(dir, "clientkey.pem")
	}
	ca, cert, key = firstOf(e.TLS.CACertFile, ca), firstOf(e.TLS.ClientCertFile, cert), firstOf(e.TLS.ClientKeyFile, key)
	conf := &tls.Config{ServerName: e.Host, MinVersion: tls.VersionTLS12}
	conf.InsecureSkipVerify = e.TLS.InsecureSkipVerify //nolint:gosec // an explicit, documented opt-out
	if !conf.InsecureSkipVerify {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("reading the CA certificate for %s: %w", e.Host, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate found in %s", ca)
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("reading the client certificate for %s: %w", e.Host, err)
	}
	conf.Certificates = []tls.Certificate{pair}
	return conf, nil
}

var noDeadline time.Time

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
