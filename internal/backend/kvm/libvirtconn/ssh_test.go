package libvirtconn

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// sshServer is an in-process sshd on loopback: it accepts one client key, forwards direct-tcpip (a jump
// host) and direct-streamlocal@openssh.com (a libvirt host) channels, and records who logged in and what
// each channel asked for.
type sshServer struct {
	addr    string
	hostKey ssh.Signer
	// refuse rejects every forwarding as an sshd with AllowTcpForwarding or AllowStreamLocalForwarding no.
	refuse bool

	mu        sync.Mutex
	users     []string
	forwarded []string // "tcp 127.0.0.1:port" or "unix /path"
}

func newSigner(t *testing.T) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return s, pem.EncodeToMemory(block)
}

func startSSHServer(t *testing.T, clientKey ssh.PublicKey, refuse bool) *sshServer {
	t.Helper()
	hostKey, _ := newSigner(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := &sshServer{addr: ln.Addr().String(), hostKey: hostKey, refuse: refuse}
	conf := &ssh.ServerConfig{PublicKeyCallback: func(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if string(key.Marshal()) != string(clientKey.Marshal()) {
			return nil, errors.New("unknown key")
		}
		s.mu.Lock()
		s.users = append(s.users, md.User())
		s.mu.Unlock()
		return nil, nil
	}}
	conf.AddHostKey(hostKey)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, conf)
		}
	}()
	return s
}

func (s *sshServer) serve(c net.Conn, conf *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, conf)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		var network, target string
		switch nc.ChannelType() {
		case "direct-tcpip":
			var p struct {
				Host       string
				Port       uint32
				OriginHost string
				OriginPort uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &p) == nil {
				network, target = "tcp", net.JoinHostPort(p.Host, fmt.Sprint(p.Port))
			}
		case "direct-streamlocal@openssh.com":
			var p struct {
				Path      string
				Reserved0 string
				Reserved1 uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &p) == nil {
				network, target = "unix", p.Path
			}
		}
		s.mu.Lock()
		s.forwarded = append(s.forwarded, network+" "+target)
		s.mu.Unlock()
		go s.forward(nc, network, target)
	}
}

func (s *sshServer) forward(nc ssh.NewChannel, network, target string) {
	if network == "" || s.refuse {
		// What OpenSSH's sshd answers when its configuration forbids the forwarding.
		_ = nc.Reject(ssh.Prohibited, "open failed")
		return
	}
	out, err := net.Dial(network, target)
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		_ = out.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	go func() { _, _ = io.Copy(out, ch); _ = out.Close() }()
	_, _ = io.Copy(ch, out)
	_ = ch.Close()
}

func (s *sshServer) seen() (users, forwarded []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.users...), append([]string(nil), s.forwarded...)
}

// echoSocket stands in for libvirtd's socket: it echoes what it reads, which proves the stream reached it.
func echoSocket(t *testing.T) string {
	return serveSocket(t, func(c net.Conn) { _, _ = io.Copy(c, c); _ = c.Close() })
}

// serveSocket listens on a unix socket of the test's own, as libvirtd's, and hands each connection to serve
// in a goroutine of its own. It returns the socket's path.
func serveSocket(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "libvirt-sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return path
}

// knownHostsLine is host's entry as ssh writes it for a port other than 22: [host]:port, hashed if asked.
func knownHostsLine(addr string, key ssh.PublicKey, hashed bool) string {
	name := xknownhosts.Normalize(addr)
	if hashed {
		return xknownhosts.HashHostname(name) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	}
	return xknownhosts.Line([]string{name}, key)
}

// TestSSHThroughJumpHost dials a libvirt host the ssh configuration reaches only through a jump host, as
// virsh would with the same ~/.ssh/config: an alias matched by a wildcard pattern, its HostName, User, Port
// and IdentityFile (under ~), a ProxyJump to another alias, known_hosts entries hashed and for ports other
// than 22, and Host * defaults that lose to the earlier, more specific block.
func TestSSHThroughJumpHost(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "") // the keys are the config's, not a developer's agent's
	clientKey, clientPEM := newSigner(t)
	if err := os.MkdirAll(filepath.Join(home, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "keys", "libvirt"), clientPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	socket := echoSocket(t)
	impostor, _ := newSigner(t)

	tests := map[string]struct {
		refuseStreamLocal bool
		wrongJumpKey      bool
		wantErr           string // empty: the dial succeeds
	}{
		"through the jump host":       {},
		"jump host key wrong":         {wrongJumpKey: true, wantErr: "jump host bastion"},
		"stream-local forwarding off": {refuseStreamLocal: true, wantErr: "AllowStreamLocalForwarding yes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jump := startSSHServer(t, clientKey.PublicKey(), false)
			libvirtHost := startSSHServer(t, clientKey.PublicKey(), tc.refuseStreamLocal)
			jumpKey := jump.hostKey.PublicKey()
			if tc.wrongJumpKey {
				jumpKey = impostor.PublicKey()
			}
			known := knownHostsLine(jump.addr, jumpKey, true) + "\n" + knownHostsLine(libvirtHost.addr, libvirtHost.hostKey.PublicKey(), false) + "\n"
			config := sshTestConfig(t, home, jump.addr, libvirtHost.addr, known)
			e := Endpoint{Transport: "ssh", Host: "kvm-1", Socket: socket, SSH: SSHLogin{ConfigFile: config}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := dialTransport(ctx, e)
			if tc.wantErr != "" {
				var ce *ConfigError
				if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("dial = %v, want a ConfigError (no retry) mentioning %q", err, tc.wantErr)
				}
				t.Logf("refused as wanted: %v", err)
				if _, forwarded := libvirtHost.seen(); tc.wrongJumpKey && len(forwarded) > 0 {
					t.Errorf("the libvirt host was reached (%v) through a jump host whose key is wrong", forwarded)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			assertEcho(t, conn)
			jumpUsers, jumpForwarded := jump.seen()
			hostUsers, hostForwarded := libvirtHost.seen()
			if want := "tcp " + libvirtHost.addr; len(jumpForwarded) != 1 || jumpForwarded[0] != want || jumpUsers[0] != "jumper" {
				t.Errorf("jump host: users %v forwarded %v, want jumper forwarding to %s", jumpUsers, jumpForwarded, want)
			}
			if want := "unix " + socket; len(hostForwarded) != 1 || hostForwarded[0] != want || hostUsers[0] != "virt" {
				t.Errorf("libvirt host: users %v forwarded %v, want virt forwarding to %s", hostUsers, hostForwarded, want)
			}
		})
	}
}

// sshTestConfig writes an ssh configuration and known_hosts under home: the libvirt host kvm-1 is reached
// as user virt through the jump host bastion, as user jumper.
func sshTestConfig(t *testing.T, home, jumpAddr, hostAddr, known string) string {
	t.Helper()
	jumpHost, jumpPort, _ := net.SplitHostPort(jumpAddr)
	hostHost, hostPort, _ := net.SplitHostPort(hostAddr)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(known), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(home, filepath.Join(dir, "known_hosts"))
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`# Written as a user would: the specific blocks first, the defaults last.
Host bastion
    HostName %s
    Port %s
    User jumper

Host kvm-* !kvm-9
    HostName %s
    Port %s
    User virt
    ProxyJump bastion

Host *
    User nobody
    Port 1
    IdentityFile ~/keys/missing
    IdentityFile ~/keys/libvirt
    UserKnownHostsFile ~/%s
`, jumpHost, jumpPort, hostHost, hostPort, rel)
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func assertEcho(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("libvirt")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("libvirt"))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "libvirt" {
		t.Fatalf("read %q, %v through the chain, want the socket's echo", got, err)
	}
}

// TestKnownHostsAsOpenSSH checks host keys through the login's own configuration, as OpenSSH reads
// known_hosts: hashed names, [host]:port for a port other than 22 (and no port-22 entry standing in for it),
// @cert-authority (a certificate the CA signed, never a plain key), @revoked, and a line with a marker it
// does not know skipped, so it trusts nothing.
func TestKnownHostsAsOpenSSH(t *testing.T) {
	t.Parallel()
	hostKey, _ := newSigner(t)
	caKey, _ := newSigner(t)
	revokedKey, _ := newSigner(t)
	cert := &ssh.Certificate{Key: hostKey.PublicKey(), CertType: ssh.HostCert, ValidPrincipals: []string{"db.ca.example"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, caKey); err != nil {
		t.Fatal(err)
	}
	authorized := func(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }
	lines := []string{
		knownHostsLine("hashed.example:2222", hostKey.PublicKey(), true),
		knownHostsLine("port22.example:22", hostKey.PublicKey(), false),
		"@cert-authority *.ca.example " + authorized(caKey.PublicKey()),
		knownHostsLine("revoked.example:22", revokedKey.PublicKey(), false),
		"@revoked * " + authorized(revokedKey.PublicKey()),
	}
	tests := map[string]struct {
		addr    string
		key     ssh.PublicKey
		extra   string // a line added to the file
		wantErr string // empty: the key is accepted
	}{
		"hashed, odd port":              {addr: "hashed.example:2222", key: hostKey.PublicKey()},
		"port 22 entry, other port":     {addr: "port22.example:2200", key: hostKey.PublicKey(), wantErr: "is not in known hosts file"},
		"certificate the CA signed":     {addr: "db.ca.example:22", key: cert},
		"plain key where a CA is known": {addr: "db.ca.example:22", key: hostKey.PublicKey(), wantErr: "is not the one"},
		"revoked":                       {addr: "revoked.example:22", key: revokedKey.PublicKey(), wantErr: "is revoked"},
		// OpenSSH skips a line with a marker it does not know, so the host is unknown, not trusted.
		"unknown marker": {addr: "trusted.example:22", key: hostKey.PublicKey(), extra: "@trusted trusted.example " + authorized(hostKey.PublicKey()), wantErr: "is not in known hosts file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			known := filepath.Join(t.TempDir(), "known_hosts")
			if err := os.WriteFile(known, []byte(strings.Join(append(lines, tc.extra), "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			hop := sshHop{alias: tc.addr, addr: tc.addr, user: "virt", knownHosts: []string{known}}
			conf, err := sshClientConfig(hop, SSHLogin{}, true, []ssh.Signer{hostKey}, nil)
			if err == nil {
				err = conf.HostKeyCallback(tc.addr, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}, tc.key)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("checking %s = %v, want an error mentioning %q (none if empty)", tc.addr, err, tc.wantErr)
			}
		})
	}
}
