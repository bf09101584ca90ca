package kvm

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"

	libvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The ssh transport against the real OpenSSH server (scripts/install-deps.sh installs it), run on a loopback
// port with a throwaway configuration, in front of the same libvirtd the other live tests use. Everything
// the test inspects or cleans up goes through the local unix socket instead, so a broken ssh path cannot
// hide what it did.

// sshHost is the backend's name for libvirtd reached over ssh; liveHost is the same daemon reached directly.
const sshHost = "remote"

// sshServer is one sshd for the whole test, and the keys it and its clients use.
type sshServer struct {
	dir  string
	port int
	// hostKey is the server's ed25519 public key line ("ssh-ed25519 AAAA... comment").
	hostKey string
	// clientKey is the private key authorized_keys lets in as root.
	clientKey string
	// caKey is the public key line of the CA that signed the ed25519 host key's certificate.
	caKey string
	// socket is the far side's libvirtd socket: the test instance's own (scripts/libvirt-env.sh), which
	// the ssh transport must be told of as a qemu+ssh URI copied from virsh would tell it.
	socket string
	log    *testutil.LockedBuffer
}

func TestLiveSSH(t *testing.T) {
	base := liveHostConfig(t) // skips unless EGRESS_LIBVIRT_URI is set; from here on everything must pass
	// No ~/.ssh of whoever runs the test: every key and known_hosts file is the test's own, so a default
	// file cannot make a case pass that should fail, or the reverse.
	t.Setenv("HOME", t.TempDir())
	t.Setenv("SSH_AUTH_SOCK", "") // nor the agent of whoever runs it: the agent cases start their own
	srv := startSSHD(t)
	local := liveBackend(t)

	// remote is a backend whose only host is libvirtd over ssh, configured by edit.
	remote := func(t *testing.T, edit func(h *HostConfig)) *Backend {
		h := base
		h.URI = srv.uri("")
		h.SSHKeyFile = srv.clientKey
		h.SSHKnownHostsFile = srv.knownHosts(t, srv.hostKey)
		edit(&h)
		b, err := New(Config{Hosts: map[string]HostConfig{sshHost: h}})
		if err != nil {
			t.Fatal(err)
		}
		b.pollInterval = 200 * time.Millisecond
		closeAtEnd(t, b)
		return b
	}
	// otherKey is a valid key that is neither the server's host key nor authorized.
	otherKey := filepath.Join(srv.dir, "other_ed25519")
	otherPub := sshKeygen(t, "ed25519", otherKey)

	t.Run("connects", func(t *testing.T) {
		tests := map[string]func(t *testing.T, h *HostConfig){
			"key and known_hosts in the host config": func(*testing.T, *HostConfig) {},
			// libvirt's own URI options, as a qemu+ssh URI copied from virsh would carry them.
			"keyfile and known_hosts in the URI": func(_ *testing.T, h *HostConfig) {
				h.URI = srv.uri("?keyfile=" + h.SSHKeyFile + "&known_hosts=" + h.SSHKnownHostsFile)
				h.SSHKeyFile, h.SSHKnownHostsFile = "", ""
			},
			// The opt-out must not read any known_hosts: HOME has none, and none is configured.
			"host key not verified, no known_hosts": func(_ *testing.T, h *HostConfig) {
				h.SSHKnownHostsFile = ""
				h.InsecureIgnoreHostKey = true
			},
			// known_hosts trusts only the CA that signed the server's host certificate: the login works only
			// if the client asks for the certificate and checks it against that CA.
			"host certificate signed by a known CA": func(t *testing.T, h *HostConfig) {
				h.SSHKnownHostsFile = writeKnownHosts(t, fmt.Sprintf("@cert-authority [127.0.0.1]:%d %s\n", srv.port, srv.caKey))
			},
			// The host's entry hashed, as HashKnownHosts yes writes it.
			"hashed known_hosts entry": func(t *testing.T, h *HostConfig) {
				line := xknownhosts.HashHostname(fmt.Sprintf("[127.0.0.1]:%d", srv.port)) + " " + srv.hostKey
				h.SSHKnownHostsFile = writeKnownHosts(t, line+"\n")
			},
			// No key file at all (HOME has no ~/.ssh): the only key is in the ssh-agent.
			"agent only": func(t *testing.T, h *HostConfig) {
				h.SSHKeyFile = ""
				t.Setenv("SSH_AUTH_SOCK", startAgent(t, srv.clientKey))
			},
			// The default key files: the first needs a passphrase (skipped, not fatal), the next one logs in.
			"protected first key, usable second": func(t *testing.T, h *HostConfig) {
				h.SSHKeyFile = ""
				home := t.TempDir()
				t.Setenv("HOME", home)
				sshKeygenProtected(t, "ed25519", filepath.Join(home, ".ssh", "id_ed25519"))
				srv.authorize(t, sshKeygen(t, "ecdsa", filepath.Join(home, ".ssh", "id_ecdsa")))
			},
			// The usual laptop: a passphrase-protected key file whose key the agent holds.
			"protected key file, its key in the agent": func(t *testing.T, h *HostConfig) {
				h.SSHKeyFile = ""
				home := t.TempDir()
				t.Setenv("HOME", home)
				plain := filepath.Join(t.TempDir(), "id_ed25519")
				srv.authorize(t, sshKeygen(t, "ed25519", plain))
				protected := filepath.Join(home, ".ssh", "id_ed25519")
				sshKeygenProtected(t, "ed25519", protected)
				t.Setenv("SSH_AUTH_SOCK", startAgent(t, plain))
			},
		}
		for name, edit := range tests {
			t.Run(name, func(t *testing.T) {
				b := remote(t, func(h *HostConfig) { edit(t, h) })
				logins := srv.logins()
				h := b.Check(ctxFor(t, time.Minute))
				if len(h) != 1 || !h[0].Healthy || h[0].Target != sshHost || h[0].Details["libvirt_version"] == "" ||
					!strings.HasPrefix(h[0].Details["hypervisor"], "QEMU ") || h[0].Details["pool_available_bytes"] == "" {
					t.Fatalf("Check = %+v, want %s healthy with the libvirt and QEMU versions", h, sshHost)
				}
				// sshd saw the login: the health came through it, not some other way to the daemon.
				if srv.logins() <= logins {
					t.Errorf("Check succeeded but sshd logged no new public key login")
				}
			})
		}
	})

	t.Run("create get delete", func(t *testing.T) {
		b := remote(t, func(*HostConfig) {})
		spec := liveSpec(testOwner())
		spec.Placement.Target = sshHost
		cleanupProxy(t, local, spec.Name) // through the unix socket: works even if sshd is what broke

		inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
		if err != nil {
			t.Fatalf("Create over ssh: %v", err)
		}
		if want := "kvm/" + sshHost + "/" + spec.Name; inst.ID.String() != want || inst.State != backend.StateRunning {
			t.Errorf("Create = %s %s, want %s Running", inst.ID, inst.State, want)
		}
		if st, ok := domainState(t, local, spec.Name); !ok || st != libvirt.DomainRunning {
			t.Fatalf("domain state seen locally = %v (found %v), want running", st, ok)
		}
		got, err := b.Get(ctxFor(t, 30*time.Second), inst.ID)
		if err != nil || got.UID != spec.UID || got.Owner != spec.Owner || got.State != backend.StateRunning {
			t.Fatalf("Get over ssh = %+v, %v; want uid %s owner %s Running", got, err, spec.UID, spec.Owner)
		}
		if err := b.Delete(ctxFor(t, time.Minute), inst.ID); err != nil {
			t.Fatalf("Delete over ssh: %v", err)
		}
		if _, ok := domainState(t, local, spec.Name); ok {
			t.Error("domain still exists after Delete over ssh")
		}
		if vols := volumesOf(t, local, spec.Name); len(vols) != 0 {
			t.Errorf("volumes left after Delete over ssh: %v", vols)
		}
		if _, err := b.Get(ctxFor(t, 30*time.Second), inst.ID); !backend.IsNotFound(err) {
			t.Errorf("Get over ssh after Delete = %v, want NotFound", err)
		}
	})

	// Refusals are the user's to fix (known_hosts, keys): Permanent, so nothing retries them for minutes,
	// and at once, on the first call of a fresh backend.
	t.Run("refused", func(t *testing.T) {
		tests := map[string]struct {
			edit func(t *testing.T, h *HostConfig)
			want string
		}{
			"host key differs from known_hosts": {
				edit: func(t *testing.T, h *HostConfig) { h.SSHKnownHostsFile = srv.knownHosts(t, otherPub) },
				want: "host key",
			},
			"host not in known_hosts": {
				edit: func(t *testing.T, h *HostConfig) {
					h.SSHKnownHostsFile = writeKnownHosts(t, "[127.0.0.1]:1 "+srv.hostKey+"\n")
				},
				want: "host key",
			},
			"client key not authorized": {
				edit: func(_ *testing.T, h *HostConfig) { h.SSHKeyFile = otherKey },
				want: "unable to authenticate",
			},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				b := remote(t, func(h *HostConfig) { tc.edit(t, h) })
				spec := liveSpec(testOwner())
				spec.Placement.Target = sshHost
				cleanupProxy(t, local, spec.Name)
				logins := srv.logins()
				start := time.Now()
				_, err := b.Create(ctxFor(t, time.Minute), spec)
				took := time.Since(start)
				if backend.ClassOf(err) != backend.ClassPermanent || backend.Retryable(err) || took > 5*time.Second {
					t.Fatalf("Create = %v after %v, want a Permanent error at once", err, took)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Create = %v, want it to mention %q", err, tc.want)
				}
				t.Logf("refused as it should be: %v", err)
				if srv.logins() != logins {
					t.Error("sshd logged a login for a connection the client should have refused or been refused")
				}
				if _, ok := domainState(t, local, spec.Name); ok {
					t.Error("a refused Create made a domain")
				}
				if vols := volumesOf(t, local, spec.Name); len(vols) != 0 {
					t.Errorf("a refused Create made volumes: %v", vols)
				}
			})
		}
	})
}

// startSSHD runs /usr/sbin/sshd in the foreground on a free loopback port, configured entirely from a
// temporary directory, and stops it when the test ends.
func startSSHD(t *testing.T) *sshServer {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatalf("the ssh transport test needs OpenSSH's server: run scripts/install-deps.sh (%v)", err)
	}
	// sshd refuses to start without its privilege separation directory, which only the package's
	// service unit would otherwise create.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &sshServer{dir: dir, clientKey: filepath.Join(dir, "client_ed25519"), socket: liveSocket(t), log: &testutil.LockedBuffer{}}
	s.hostKey = sshKeygen(t, "ed25519", filepath.Join(dir, "host_ed25519"))
	// A second host key of the type x/crypto prefers, as every stock sshd has (RSA, ECDSA and ed25519):
	// known_hosts lists only the ed25519 one, as `ssh-keyscan -t ed25519` or a hand-written entry would.
	sshKeygen(t, "ecdsa", filepath.Join(dir, "host_ecdsa"))
	writeFileIn(t, dir, "authorized_keys", sshKeygen(t, "ed25519", s.clientKey)+"\n")
	// A host certificate for the ed25519 key, signed by a CA of the test's: sshd presents it to clients that
	// ask for a certificate, the plain key to the others.
	ca := filepath.Join(dir, "host_ca")
	s.caKey = sshKeygen(t, "ed25519", ca)
	if out, err := exec.Command("ssh-keygen", "-q", "-s", ca, "-I", "egress-test-host", "-h", "-n", "127.0.0.1",
		filepath.Join(dir, "host_ed25519.pub")).CombinedOutput(); err != nil {
		t.Fatalf("signing the host key: %v\n%s", err, out)
	}

	// The port is free when asked and sshd takes it a moment later; another process may take it in between,
	// hence a few attempts.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		cfg := writeFileIn(t, dir, "sshd_config", strings.Join([]string{
			"Port " + strconv.Itoa(s.port),
			"ListenAddress 127.0.0.1",
			"HostKey " + filepath.Join(dir, "host_ed25519"),
			"HostKey " + filepath.Join(dir, "host_ecdsa"),
			"HostCertificate " + filepath.Join(dir, "host_ed25519-cert.pub"),
			"UsePAM no",
			"PermitRootLogin prohibit-password",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
			"StrictModes no", // the temporary directory's owner and modes are the test's, not a home's
			"AllowStreamLocalForwarding yes",
			"PidFile " + filepath.Join(dir, "sshd.pid"),
		}, "\n")+"\n")
		err := s.run(t, cfg)
		if err == nil {
			return s
		}
		if attempt == 3 || !strings.Contains(s.log.String(), "Address already in use") {
			t.Fatalf("starting sshd: %v\n%s", err, s.log)
		}
	}
}

// run starts sshd with cfg and waits until it greets on its port.
func (s *sshServer) run(t *testing.T, cfg string) error {
	// -D keeps it in the foreground, so it is this process's child; -e sends its log to stderr.
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Each connection's sshd process writes to the same stderr and ends when the backend closes it, which
	// t.Cleanup does before stopping sshd (cleanups run last-registered-first). A connection a stuck client
	// keeps open must not hold Wait on that pipe forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	var waitErr error // set before exited closes
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // it may have exited already
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("sshd exited: %w", waitErr)
		default:
		}
		if greets(s.port) {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return errors.New("sshd did not greet on its port within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.log)
		}
	})
	return nil
}

// greets reports whether an SSH server answers on the loopback port with its version banner.
func greets(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4)
	_, err = c.Read(buf)
	return err == nil && string(buf) == "SSH-"
}

func (s *sshServer) uri(query string) string {
	params := "socket=" + url.QueryEscape(s.socket)
	if query != "" {
		params = strings.TrimPrefix(query, "?") + "&" + params
	}
	return fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system?%s", s.port, params)
}

// knownHosts writes a known_hosts file that lists key for this server, in OpenSSH's own format for a host
// on a non-standard port.
func (s *sshServer) knownHosts(t *testing.T, key string) string {
	return writeKnownHosts(t, fmt.Sprintf("[127.0.0.1]:%d %s\n", s.port, key))
}

// logins counts the public key logins sshd accepted so far.
func (s *sshServer) logins() int {
	return strings.Count(s.log.String(), "Accepted publickey for root from 127.0.0.1")
}

// authorize lets pub log in as root from now on: sshd reads authorized_keys at each login.
func (s *sshServer) authorize(t *testing.T, pub string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(pub + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// startAgent serves an ssh-agent holding the private key in keyFile on a unix socket of the test, and
// returns the socket's path for SSH_AUTH_SOCK. x/crypto's agent speaks the same protocol as OpenSSH's.
func startAgent(t *testing.T, keyFile string) string {
	t.Helper()
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: key}); err != nil {
		t.Fatal(err)
	}
	// A short directory: a unix socket's path must fit in 108 bytes, which t.TempDir's may not.
	dir, err := os.MkdirTemp("", "agent") //nolint:usetesting // t.TempDir's path can be too long for a socket
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = agent.ServeAgent(keyring, c) // ends when the client closes: nothing to report
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close() // ends the accept loop
		<-done
		_ = os.RemoveAll(dir) // the socket only
	})
	return sock
}

// sshKeygenProtected makes a key pair at path, in a directory it creates, protected by a passphrase no
// one is told.
func sshKeygenProtected(t *testing.T, typ, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", typ, "-N", "not-given-to-the-provider", "-C", "egress-test", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -t %s: %v\n%s", typ, err, out)
	}
}

// sshKeygen makes a key pair without a passphrase at path and returns the public key line.
func sshKeygen(t *testing.T, typ, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", typ, "-N", "", "-C", "egress-test", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -t %s: %v\n%s", typ, err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pub))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // a tcp listener's address is a TCPAddr
}

// writeKnownHosts writes a known_hosts file with content in a new temporary directory of the test and returns its path.
func writeKnownHosts(t *testing.T, content string) string {
	return writeFileIn(t, t.TempDir(), "known_hosts", content)
}

func writeFileIn(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
