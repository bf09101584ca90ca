package kvm

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
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// dialTransport opens the byte stream to libvirtd that t describes. Every transport dials with ctx, so an
// unreachable host fails when the caller's deadline passes, not after the OS's TCP timeout.
func dialTransport(ctx context.Context, h HostConfig, t target) (net.Conn, error) {
	var d net.Dialer
	switch t.transport {
	case "unix":
		return d.DialContext(ctx, "unix", t.socket)
	case "tcp":
		return d.DialContext(ctx, "tcp", net.JoinHostPort(t.host, t.port))
	case "tls":
		conf, err := tlsConfig(h, t)
		if err != nil {
			return nil, &configError{err}
		}
		td := tls.Dialer{NetDialer: &d, Config: conf}
		return td.DialContext(ctx, "tcp", net.JoinHostPort(t.host, t.port))
	case "ssh":
		return dialSSH(ctx, h, t)
	}
	return nil, &configError{fmt.Errorf("transport %q is not supported", t.transport)}
}

// configError marks dial failures that no retry can fix: missing keys, unreadable certificates.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// tlsConfig follows libvirt's PKI layout, so hosts set up for virsh work unchanged.
func tlsConfig(h HostConfig, t target) (*tls.Config, error) {
	ca, cert, key := "/etc/pki/CA/cacert.pem", "/etc/pki/libvirt/clientcert.pem", "/etc/pki/libvirt/private/clientkey.pem"
	if dir := t.query.Get("pkipath"); dir != "" {
		ca, cert, key = filepath.Join(dir, "cacert.pem"), filepath.Join(dir, "clientcert.pem"), filepath.Join(dir, "clientkey.pem")
	}
	ca, cert, key = firstOf(h.TLSCACertFile, ca), firstOf(h.TLSClientCertFile, cert), firstOf(h.TLSClientKeyFile, key)
	conf := &tls.Config{ServerName: t.host, MinVersion: tls.VersionTLS12}
	noVerify, _ := strconv.Atoi(t.query.Get("no_verify"))
	conf.InsecureSkipVerify = h.InsecureSkipVerify || noVerify != 0 //nolint:gosec // an explicit, documented opt-out
	if !conf.InsecureSkipVerify {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("reading the CA certificate for %s: %w", t.host, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate found in %s", ca)
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("reading the client certificate for %s: %w", t.host, err)
	}
	conf.Certificates = []tls.Certificate{pair}
	return conf, nil
}

// dialSSH reaches the remote daemon's unix socket through an SSH channel, like libvirt's ssh transport,
// but in Go: no ssh binary, no netcat on the remote side.
func dialSSH(ctx context.Context, h HostConfig, t target) (net.Conn, error) {
	conf, err := sshConfig(h, t)
	if err != nil {
		return nil, &configError{err}
	}
	var d net.Dialer
	addr := net.JoinHostPort(t.host, t.port)
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
		return nil, &configError{err} // host key mismatch, authentication refused: retrying cannot help
	}
	client := ssh.NewClient(c, chans, reqs)
	// Opening the channel to the socket is bounded by the same deadline: a server that accepts the login and
	// never answers the channel request fails the dial instead of hanging it.
	conn, err := client.Dial("unix", t.socket)
	if err != nil {
		_ = client.Close() // the socket's error is the one worth reporting
		return nil, fmt.Errorf("opening libvirt's socket %s on %s: %w", t.socket, t.host, err)
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

func sshConfig(h HostConfig, t target) (*ssh.ClientConfig, error) {
	home, _ := os.UserHomeDir()
	user := t.user
	if user == "" {
		user = os.Getenv("USER")
	}
	keyFiles := []string{firstOf(h.SSHKeyFile, t.query.Get("keyfile"))}
	if keyFiles[0] == "" {
		keyFiles = []string{filepath.Join(home, ".ssh/id_ed25519"), filepath.Join(home, ".ssh/id_ecdsa"), filepath.Join(home, ".ssh/id_rsa")}
	}
	var signers []ssh.Signer
	for _, f := range keyFiles {
		pem, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			return nil, fmt.Errorf("ssh key %s: %w", f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		return nil, fmt.Errorf("no usable ssh private key (tried %v): set the host's ssh key file", keyFiles)
	}
	conf := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)}}
	noVerify, _ := strconv.Atoi(t.query.Get("no_verify"))
	if h.InsecureIgnoreHostKey || noVerify != 0 {
		conf.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // an explicit, documented opt-out
		return conf, nil
	}
	known := firstOf(h.SSHKnownHostsFile, t.query.Get("known_hosts"), filepath.Join(home, ".ssh/known_hosts"))
	cb, err := knownhosts.New(known)
	if err != nil {
		return nil, fmt.Errorf("known hosts file %s (host keys are verified unless insecure_ignore_host_key is set): %w", known, err)
	}
	conf.HostKeyCallback = explainHostKey(cb, known)
	conf.HostKeyAlgorithms = knownHostKeyAlgorithms(cb, net.JoinHostPort(t.host, t.port))
	return conf, nil
}

// knownHostKeyAlgorithms asks the server for a key of a type known_hosts lists for addr, as OpenSSH does.
// Without it x/crypto asks for ECDSA or RSA before ed25519, so a host with keys of several types (every
// stock sshd) presents one known_hosts may not list, and a correct ed25519 entry fails as a mismatch. The
// other algorithms follow, so certificate authorities and hosts without those key types still work. Nil
// (x/crypto's order) when known_hosts lists no key for addr.
func knownHostKeyAlgorithms(cb ssh.HostKeyCallback, addr string) []string {
	// knownhosts tells which keys it has for a host only in the error for a key it does not have.
	var ke *knownhosts.KeyError
	if err := cb(addr, &net.TCPAddr{}, probeKey{}); !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	add := func(a ...string) {
		for _, x := range a {
			if !slices.Contains(algos, x) {
				algos = append(algos, x)
			}
		}
	}
	for _, k := range ke.Want {
		if typ := k.Key.Type(); typ == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA) // one RSA key, three signatures
		} else {
			add(typ)
		}
	}
	add(ssh.SupportedAlgorithms().HostKeys...)
	return algos
}

// probeKey is a public key no known_hosts line can hold.
type probeKey struct{}

func (probeKey) Type() string    { return "egress-probe" }
func (probeKey) Marshal() []byte { return []byte("egress-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error {
	return errors.New("a probe key verifies nothing")
}

// explainHostKey says what knownhosts' terse "key mismatch" and "key is unknown" mean, with the key the
// host presented, so the user can compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*.pub).
func explainHostKey(cb ssh.HostKeyCallback, known string) ssh.HostKeyCallback {
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(host, remote, key)
		presented := key.Type() + " " + ssh.FingerprintSHA256(key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
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
