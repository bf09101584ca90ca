package libvirtconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// Endpoint is one libvirt daemon and how to log in to it, as its URI and the host's settings say. File names
// left empty take the defaults virsh uses.
type Endpoint struct {
	Transport string // unix, tcp, tls or ssh
	Host      string // host name, no port
	Port      string
	User      string // for ssh; empty means $USER
	Socket    string // the daemon's unix socket: local for unix, remote for ssh
	// Name is the URI sent in ConnectOpen: the daemon is local to itself, so the transport is dropped.
	Name string
	SSH  SSHLogin
	TLS  TLSLogin
}

// SSHLogin is how the ssh transport logs in, as OpenSSH would.
type SSHLogin struct {
	// KeyFile is the private key; empty means ~/.ssh/id_ed25519, id_ecdsa and id_rsa. The keys of the
	// ssh-agent at SSH_AUTH_SOCK are offered first.
	KeyFile string
	// KnownHostsFile verifies the host key; empty means ~/.ssh/known_hosts.
	KnownHostsFile        string
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

// dialSSH reaches the remote daemon's unix socket through an SSH channel, like libvirt's ssh transport,
// but in Go: no ssh binary, no netcat on the remote side.
func dialSSH(ctx context.Context, e Endpoint) (net.Conn, error) {
	addr := net.JoinHostPort(e.Host, e.Port)
	conf, done, err := sshConfig(e.User, e.SSH, addr)
	if err != nil {
		return nil, &ConfigError{err}
	}
	defer done() // the agent is needed for the login only
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The handshake is not ctx-aware: the deadline on the raw connection bounds it instead.
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	c, chans, reqs, err := ssh.NewClientConn(raw, addr, conf)
	if err != nil {
		_ = raw.Close() // the handshake's error is the one worth reporting
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) {
			return nil, err // the network failed: worth retrying
		}
		return nil, &ConfigError{err} // host key mismatch, authentication refused: retrying cannot help
	}
	client := ssh.NewClient(c, chans, reqs)
	// Opening the channel to the socket is bounded by the same deadline: a server that accepts the login and
	// never answers the channel request fails the dial instead of hanging it.
	conn, err := client.Dial("unix", e.Socket)
	if err != nil {
		_ = client.Close() // the socket's error is the one worth reporting
		return nil, fmt.Errorf("opening libvirt's socket %s on %s: %w", e.Socket, e.Host, err)
	}
	_ = raw.SetDeadline(noDeadline)
	return &sshConn{Conn: conn, client: client}, nil
}

// sshConn closes the SSH client with the channel, so a dropped libvirt connection leaks no TCP connection.
type sshConn struct {
	net.Conn
	client *ssh.Client
}

func (c *sshConn) Close() error {
	err := c.Conn.Close()
	return errors.Join(err, c.client.Close())
}

// sshConfig logs in as user as OpenSSH would: with the keys of the ssh-agent at SSH_AUTH_SOCK, then with
// every key file that can be read without a passphrase (the configured one, else ~/.ssh/id_ed25519,
// id_ecdsa, id_rsa). A passphrase-protected file is skipped, not fatal: its key is often in the agent. done
// closes the agent connection once the login is over.
func sshConfig(user string, login SSHLogin, addr string) (conf *ssh.ClientConfig, done func(), err error) {
	home, _ := os.UserHomeDir()
	if user == "" {
		user = os.Getenv("USER")
	}
	signers, tried, done := agentSigners()
	keyFiles := []string{login.KeyFile}
	if keyFiles[0] == "" {
		keyFiles = []string{filepath.Join(home, ".ssh/id_ed25519"), filepath.Join(home, ".ssh/id_ecdsa"), filepath.Join(home, ".ssh/id_rsa")}
	}
	for _, f := range keyFiles {
		s, note := readSigner(f)
		tried = append(tried, note)
		if s != nil {
			signers = append(signers, s)
		}
	}
	if len(signers) == 0 {
		done()
		return nil, nil, fmt.Errorf("no usable ssh key (%s): set the host's ssh key file, or add the key to the ssh-agent", strings.Join(tried, "; "))
	}
	conf = &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)}}
	if login.InsecureIgnoreHostKey {
		conf.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // an explicit, documented opt-out
		return conf, done, nil
	}
	known := firstOf(login.KnownHostsFile, filepath.Join(home, ".ssh/known_hosts"))
	db, err := knownhosts.NewDB(known)
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("known hosts file %s (host keys are verified unless insecure_ignore_host_key is set): %w", known, err)
	}
	conf.HostKeyCallback = explainHostKey(db.HostKeyCallback(), known)
	conf.HostKeyAlgorithms = hostKeyAlgorithms(db, addr)
	return conf, done, nil
}

// agentSigners returns the keys of the ssh-agent at SSH_AUTH_SOCK, if one answers, a note of what was
// tried, and a func that closes the agent connection.
func agentSigners() ([]ssh.Signer, []string, func()) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, nil, func() {}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, []string{fmt.Sprintf("ssh-agent at %s: %v", sock, err)}, func() {}
	}
	done := func() { _ = c.Close() } // the login is over: nothing is left to say to the agent
	signers, err := agent.NewClient(c).Signers()
	if err != nil || len(signers) == 0 {
		return nil, []string{fmt.Sprintf("ssh-agent at %s: no keys (%v)", sock, err)}, done
	}
	return signers, nil, done
}

// readSigner reads one private key file. A file that is missing or needs a passphrase gives no signer and a
// note saying so; only a file that is there and unreadable as a key is worth a note of its error.
func readSigner(path string) (ssh.Signer, string) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", path, errors.Unwrap(err))
	}
	s, err := ssh.ParsePrivateKey(pem)
	var pass *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &pass):
		return nil, path + ": protected by a passphrase (add it to the ssh-agent)"
	case err != nil:
		return nil, fmt.Sprintf("%s: %v", path, err)
	}
	return s, path + ": used"
}

// hostKeyAlgorithms asks the server for a host key of a type known_hosts lists for addr (a certificate's
// for an @cert-authority line), as OpenSSH does. Without it x/crypto asks for certificates, then ECDSA or
// RSA before ed25519, so a host with keys of several types (every stock sshd) presents one known_hosts may
// not list, and a correct ed25519 entry fails as a mismatch. The plain key algorithms follow, so a host
// whose key changed type is reported as a mismatch with the key it presented; certificates are asked for
// only where known_hosts trusts a CA for addr, since no other certificate could be checked.
func hostKeyAlgorithms(db *knownhosts.HostKeyDB, addr string) []string {
	algos := db.HostKeyAlgorithms(addr)
	for _, a := range ssh.SupportedAlgorithms().HostKeys {
		if !slices.Contains(algos, a) && !strings.Contains(a, "-cert-") {
			algos = append(algos, a)
		}
	}
	return algos
}

// explainHostKey says what knownhosts' terse "key mismatch" and "key is unknown" mean, with the key the
// host presented, so the user can compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*.pub).
func explainHostKey(cb ssh.HostKeyCallback, known string) ssh.HostKeyCallback {
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(host, remote, key)
		presented := key.Type() + " " + ssh.FingerprintSHA256(key)
		var ke *xknownhosts.KeyError
		var re *xknownhosts.RevokedError
		switch {
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return fmt.Errorf("the host key of %s (%s) is not in known hosts file %s: add it, or set insecure_ignore_host_key: %w",
				host, presented, known, err)
		case errors.As(err, &ke):
			return fmt.Errorf("the host key of %s (%s) is not the one known hosts file %s lists for it (line %d): the host was reinstalled, or the connection is intercepted: %w",
				host, presented, known, ke.Want[0].Line, err)
		case errors.As(err, &re):
			return fmt.Errorf("the host key of %s (%s) is revoked in %s (line %d): %w", host, presented, re.Revoked.Filename, re.Revoked.Line, err)
		}
		return err
	}
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
