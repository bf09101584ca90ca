package libvirtconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// dialSSH reaches the remote daemon's unix socket through an SSH channel, like libvirt's ssh transport,
// but in Go: no ssh binary, no netcat on the remote side. The host is resolved through the ssh client
// configuration as the ssh binary would (alias, user, port, keys, known_hosts, jump hosts), with the URI's
// user and port first, as libvirt passes them to ssh on its command line.
func dialSSH(ctx context.Context, e Endpoint) (net.Conn, error) {
	settings, err := loadSSHSettings(e.SSH.ConfigFile)
	if err != nil {
		return nil, &ConfigError{err}
	}
	hops, err := settings.route(hopSpec{alias: e.Host, user: e.User, port: e.Port}, 0)
	if err != nil {
		return nil, &ConfigError{err}
	}
	signers, tried, done := agentSigners()
	defer done() // the agent is needed for the logins only
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", hops[0].addr)
	if err != nil {
		return nil, hopError(hops, 0, err)
	}
	// The handshakes are not ctx-aware: the deadline on the first raw connection bounds them instead, and
	// every later hop's traffic crosses it.
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	chain := &sshConn{}
	next := raw
	for i, hop := range hops {
		client, err := sshLogin(next, hop, e.SSH, i == len(hops)-1, signers, tried)
		if err != nil {
			_ = next.Close()
			_ = chain.closeClients() // the login's error is the one worth reporting
			return nil, hopError(hops, i, err)
		}
		chain.clients = append(chain.clients, client)
		if i == len(hops)-1 {
			break
		}
		if next, err = client.DialContext(ctx, "tcp", hops[i+1].addr); err != nil {
			_ = chain.closeClients()
			return nil, hopError(hops, i, forwardingRefusal(err, hops[i].alias, "AllowTcpForwarding"))
		}
	}
	// Opening the channel to the socket is bounded by the same deadline: a server that accepts the login and
	// never answers the channel request fails the dial instead of hanging it.
	last := chain.clients[len(chain.clients)-1]
	conn, err := last.Dial("unix", e.Socket)
	if err != nil {
		_ = chain.closeClients() // the socket's error is the one worth reporting
		err = forwardingRefusal(err, hops[len(hops)-1].alias, "AllowStreamLocalForwarding")
		return nil, wrapKeepingClass(err, fmt.Sprintf("opening libvirt's socket %s on %s", e.Socket, e.Host))
	}
	_ = raw.SetDeadline(noDeadline)
	chain.Conn = conn
	return chain, nil
}

// sshLogin runs the SSH handshake of hop over c.
func sshLogin(c net.Conn, hop sshHop, login SSHLogin, isTarget bool, agentKeys []ssh.Signer, tried []string) (*ssh.Client, error) {
	conf, err := sshClientConfig(hop, login, isTarget, agentKeys, tried)
	if err != nil {
		return nil, &ConfigError{err}
	}
	sc, chans, reqs, err := ssh.NewClientConn(c, hop.addr, conf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) {
			return nil, err // the network failed: worth retrying
		}
		return nil, &ConfigError{err} // host key mismatch, authentication refused: retrying cannot help
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// hopError names the jump host a failure happened at; a failure at the libvirt host itself is as it was.
func hopError(hops []sshHop, i int, err error) error {
	if i == len(hops)-1 {
		return err
	}
	return wrapKeepingClass(err, fmt.Sprintf("jump host %s (%s, on the way to %s)", hops[i].alias, hops[i].addr, hops[len(hops)-1].alias))
}

// wrapKeepingClass prefixes err with what was being done, a ConfigError staying one so no retry follows.
func wrapKeepingClass(err error, doing string) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return &ConfigError{fmt.Errorf("%s: %w", doing, ce.Err)}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// forwardingRefusal says what an sshd that refuses to forward ("administratively prohibited") needs: a
// setting of the server's, which no retry changes. libvirt's own ssh transport runs nc or virt-ssh-helper on
// the host instead and so never meets it; this dialler forwards, so it says which setting to change.
func forwardingRefusal(err error, alias, setting string) error {
	var oc *ssh.OpenChannelError
	if !errors.As(err, &oc) || oc.Reason != ssh.Prohibited {
		return err
	}
	return &ConfigError{fmt.Errorf("sshd on %s refuses the forwarding the provider needs: set %s yes in its sshd_config (or in a Match block "+
		"for this user), and check that DisableForwarding is not set and the user's authorized_keys entry has no restrict or "+
		"no-port-forwarding option: %w", alias, setting, err)}
}

// sshConn closes the SSH clients with the channel, last hop first, so a dropped libvirt connection leaks
// no TCP connection.
type sshConn struct {
	net.Conn
	clients []*ssh.Client
}

func (c *sshConn) Close() error {
	err := c.Conn.Close()
	return errors.Join(err, c.closeClients())
}

func (c *sshConn) closeClients() error {
	var errs []error
	for _, client := range slices.Backward(c.clients) {
		errs = append(errs, client.Close())
	}
	return errors.Join(errs...)
}

// sshClientConfig logs in to hop as OpenSSH would: with the keys of the ssh-agent at SSH_AUTH_SOCK, then
// with every key file that can be read without a passphrase (the host's key file first at the libvirt
// host, as ssh -i; then the configuration's IdentityFile entries; with neither, ~/.ssh/id_ed25519, id_ecdsa,
// id_rsa). A passphrase-protected file is skipped, not fatal: its key is often in the agent. The host's
// key file, known_hosts file and insecure setting apply to the libvirt host only, as libvirt passes them to
// ssh for that host alone; jump hosts are verified by the configuration's known_hosts files.
func sshClientConfig(hop sshHop, login SSHLogin, isTarget bool, agentKeys []ssh.Signer, tried []string) (*ssh.ClientConfig, error) {
	home, _ := os.UserHomeDir()
	signers := slices.Clone(agentKeys)
	tried = slices.Clone(tried)
	keyFiles := hop.keyFiles
	if isTarget && login.KeyFile != "" {
		keyFiles = append([]string{login.KeyFile}, keyFiles...)
	}
	if len(keyFiles) == 0 {
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
		return nil, fmt.Errorf("no usable ssh key for %s (%s): set the host's ssh key file or an IdentityFile in the ssh configuration, or add the key to the ssh-agent",
			hop.alias, strings.Join(tried, "; "))
	}
	conf := &ssh.ClientConfig{User: hop.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)}}
	if isTarget && login.InsecureIgnoreHostKey {
		conf.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // an explicit, documented opt-out
		return conf, nil
	}
	known := hop.knownHosts
	if isTarget && login.KnownHostsFile != "" {
		known = []string{login.KnownHostsFile}
	}
	if len(known) == 0 {
		known = []string{filepath.Join(home, ".ssh/known_hosts")}
	}
	check, algos, err := knownHosts(known, hop.addr)
	if err != nil {
		return nil, fmt.Errorf("known hosts file of %s (host keys are verified unless insecure_ignore_host_key is set): %w", hop.alias, err)
	}
	conf.HostKeyCallback = explainHostKey(check, strings.Join(known, ", "), hop.strictHostKeyChecking)
	conf.HostKeyAlgorithms = algos
	return conf, nil
}

// knownHosts reads the files of a UserKnownHostsFile list that exist, as ssh does (none at all is an
// error: no host could be verified), into the check of a host's key and the key types to ask addr for. The
// check is x/crypto's own: skeema's, once a file has a wildcard or @cert-authority line, accepts a host on
// another port by its port-22 entry, which OpenSSH does not; skeema is used for the key types only.
func knownHosts(files []string, addr string) (ssh.HostKeyCallback, []string, error) {
	var present []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			present = append(present, f)
		}
	}
	if len(present) == 0 {
		return nil, nil, fmt.Errorf("none of %s exists", strings.Join(files, ", "))
	}
	check, err := xknownhosts.New(present...)
	if err != nil {
		return nil, nil, err
	}
	db, err := knownhosts.NewDB(present...)
	if err != nil {
		return nil, nil, err
	}
	return check, hostKeyAlgorithms(db, addr), nil
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
// A StrictHostKeyChecking that would accept the key is named, so the user learns why ssh connects and the
// provider does not: the provider never adds a key to known_hosts nor connects to a host it cannot verify.
func explainHostKey(cb ssh.HostKeyCallback, known, strict string) ssh.HostKeyCallback {
	var notFollowed string
	if s := strings.ToLower(strict); s == "no" || s == "off" || s == "accept-new" {
		notFollowed = fmt.Sprintf(" (the ssh configuration's StrictHostKeyChecking %s is not followed: the provider verifies every host)", strict)
	}
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(host, remote, key)
		presented := key.Type() + " " + ssh.FingerprintSHA256(key)
		var ke *xknownhosts.KeyError
		var re *xknownhosts.RevokedError
		switch {
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return fmt.Errorf("the host key of %s (%s) is not in known hosts file %s%s: add it (ssh-keyscan, or connect once with ssh), "+
				"or set insecure_ignore_host_key: %w", host, presented, known, notFollowed, err)
		case errors.As(err, &ke):
			return fmt.Errorf("the host key of %s (%s) is not the one known hosts file %s lists for it (line %d): the host was reinstalled, or the connection is intercepted: %w",
				host, presented, known, ke.Want[0].Line, err)
		case errors.As(err, &re):
			return fmt.Errorf("the host key of %s (%s) is revoked in %s (line %d): %w", host, presented, re.Revoked.Filename, re.Revoked.Line, err)
		}
		return err
	}
}
