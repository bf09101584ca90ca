package libvirtconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	w := &watchedConn{Conn: nc, lost: make(chan struct{})}
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(w))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(libvirt.ConnectURI(e.Name)) }()
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
type watchedConn struct {
	net.Conn
	once sync.Once
	lost chan struct{}

	mu      sync.Mutex
	readErr error // the first read error, which says why the stream ended
}

func (w *watchedConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if err != nil {
		w.mu.Lock()
		if w.readErr == nil {
			w.readErr = err
		}
		w.mu.Unlock()
		w.markLost()
	}
	return n, err
}

func (w *watchedConn) readError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readErr
}

func (w *watchedConn) Write(b []byte) (int, error) {
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
