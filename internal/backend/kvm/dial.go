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
	_ = raw.SetDeadline(noDeadline)
	client := ssh.NewClient(c, chans, reqs)
	conn, err := client.Dial("unix", t.socket)
	if err != nil {
		_ = client.Close() // the socket's error is the one worth reporting
		return nil, fmt.Errorf("opening libvirt's socket %s on %s: %w", t.socket, t.host, err)
	}
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
	conf.HostKeyCallback = cb
	return conf, nil
}

var noDeadline time.Time
