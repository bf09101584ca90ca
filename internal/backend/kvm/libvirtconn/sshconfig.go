package libvirtconn

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// sshSettings is the ssh client configuration the ssh binary would read, so a host virsh reaches through
// ~/.ssh/config (an alias, another user or port, a key, a jump host) is reached here the same way.
type sshSettings struct {
	files []*ssh_config.Config // first obtained value wins, file by file, as ssh_config(5) says
	names []string
	home  string
}

// loadSSHSettings reads path as ssh -F would (the system file is then not read); "" means ~/.ssh/config then
// /etc/ssh/ssh_config, each optional; "none" means no configuration at all.
func loadSSHSettings(path string) (*sshSettings, error) {
	home, _ := os.UserHomeDir()
	s := &sshSettings{home: home}
	candidates, optional := []string{path}, false
	switch path {
	case "none":
		return s, nil
	case "":
		candidates, optional = []string{filepath.Join(home, ".ssh", "config"), "/etc/ssh/ssh_config"}, true
	}
	for _, name := range candidates {
		f, err := os.Open(expandHome(name, home))
		if optional && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ssh client configuration: %w", err)
		}
		c, err := ssh_config.Decode(f)
		_ = f.Close() // read in full: a close error changes nothing
		if err != nil {
			return nil, fmt.Errorf("ssh client configuration %s: %w", name, err)
		}
		s.files, s.names = append(s.files, c), append(s.names, name)
	}
	return s, nil
}

// get is the first value of key for alias: Host blocks in file order, the first match wins.
func (s *sshSettings) get(alias, key string) (string, error) {
	for i, c := range s.files {
		v, err := c.Get(alias, key)
		if err != nil {
			return "", fmt.Errorf("ssh client configuration %s: %s for %s: %w", s.names[i], key, alias, err)
		}
		if v != "" {
			return v, nil
		}
	}
	return "", nil
}

// getAll is every value of key for alias, for the keys that accumulate (IdentityFile, and the file lists
// whose first line is the only one ssh uses, which callers then split).
func (s *sshSettings) getAll(alias, key string) ([]string, error) {
	var all []string
	for i, c := range s.files {
		vs, err := c.GetAll(alias, key)
		if err != nil {
			return nil, fmt.Errorf("ssh client configuration %s: %s for %s: %w", s.names[i], key, alias, err)
		}
		all = append(all, vs...)
	}
	return all, nil
}

// sshHop is one ssh server on the way to libvirtd: a jump host, or the libvirt host itself.
type sshHop struct {
	alias string // the name the URI or ProxyJump gave, which Host patterns match
	addr  string // host:port dialled, and looked up in known_hosts
	user  string
	// keyFiles are the config's IdentityFile entries, expanded; empty means the defaults.
	keyFiles []string
	// knownHosts is the config's UserKnownHostsFile list, expanded; empty means the default.
	knownHosts []string
	// strictHostKeyChecking is the config's value, only to explain a refusal: keys are always verified.
	strictHostKeyChecking string
}

// hopSpec is a host as a URI or a ProxyJump entry writes it; user and port given there win over the config,
// as ssh's command-line options do.
type hopSpec struct{ alias, user, port string }

// parseJump reads one ProxyJump entry: [user@]host[:port] or ssh://[user@]host[:port].
func parseJump(entry string) (hopSpec, error) {
	rest := strings.TrimPrefix(strings.TrimSpace(entry), "ssh://")
	var h hopSpec
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		h.user, rest = rest[:at], rest[at+1:]
	}
	h.alias = rest
	if host, port, err := net.SplitHostPort(rest); err == nil {
		h.alias, h.port = host, port
	}
	if h.alias == "" || strings.ContainsAny(h.alias, " /") {
		return hopSpec{}, fmt.Errorf("ProxyJump entry %q: want [user@]host[:port]", entry)
	}
	return h, nil
}

// maxJumps bounds jump hosts that name each other in the configuration.
const maxJumps = 8

// route is the hops to dial in order, ending with target: the jump hosts of target's ProxyJump, each
// resolved through the same configuration. As ssh -J a,b does, the first jump host's own ProxyJump is
// followed; each later one is reached through the one before it, whatever its own ProxyJump says.
func (s *sshSettings) route(target hopSpec, depth int) ([]sshHop, error) {
	hop, jumps, err := s.hop(target)
	if err != nil || len(jumps) == 0 {
		return []sshHop{hop}, err
	}
	if depth >= maxJumps {
		return nil, fmt.Errorf("ssh client configuration: more than %d jump hosts on the way to %s: do ProxyJump settings name each other?", maxJumps, target.alias)
	}
	hops, err := s.route(jumps[0], depth+1)
	if err != nil {
		return nil, err
	}
	for _, j := range jumps[1:] {
		h, _, err := s.hop(j)
		if err != nil {
			return nil, err
		}
		hops = append(hops, h)
	}
	return append(hops, hop), nil
}

// hop resolves one host through the configuration, and lists the jump hosts its ProxyJump names.
func (s *sshSettings) hop(spec hopSpec) (sshHop, []hopSpec, error) {
	var errs []error
	get := func(key string) string {
		v, err := s.get(spec.alias, key)
		errs = append(errs, err)
		return v
	}
	getAll := func(key string) []string {
		vs, err := s.getAll(spec.alias, key)
		errs = append(errs, err)
		return vs
	}
	h := sshHop{alias: spec.alias, user: firstOf(spec.user, get("User"), localUser())}
	hostName := firstOf(get("HostName"), spec.alias)
	port := firstOf(spec.port, get("Port"), "22")
	h.strictHostKeyChecking = get("StrictHostKeyChecking")
	jump, command := get("ProxyJump"), get("ProxyCommand")
	identityFiles, knownHosts := getAll("IdentityFile"), get("UserKnownHostsFile")
	if err := errors.Join(errs...); err != nil {
		return sshHop{}, nil, err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return sshHop{}, nil, fmt.Errorf("ssh client configuration: Port %q for %s is not a port number", port, spec.alias)
	}
	hostName = strings.NewReplacer("%%", "%", "%h", spec.alias).Replace(hostName)
	// The tokens ssh_config(5) allows in IdentityFile and UserKnownHostsFile that a provider can know.
	tokens := strings.NewReplacer("%%", "%", "%h", hostName, "%r", h.user, "%u", localUser(), "%d", s.home, "%n", spec.alias, "%p", port)
	h.addr = net.JoinHostPort(hostName, port)
	for _, f := range identityFiles {
		if !strings.EqualFold(f, "none") {
			h.keyFiles = append(h.keyFiles, expandHome(tokens.Replace(f), s.home))
		}
	}
	for _, f := range strings.Fields(knownHosts) {
		h.knownHosts = append(h.knownHosts, expandHome(tokens.Replace(f), s.home))
	}
	switch {
	case jump != "" && !strings.EqualFold(jump, "none"):
		var specs []hopSpec
		for _, entry := range strings.Split(jump, ",") {
			j, err := parseJump(entry)
			if err != nil {
				return sshHop{}, nil, fmt.Errorf("ssh client configuration for %s: %w", spec.alias, err)
			}
			specs = append(specs, j)
		}
		return h, specs, nil
	case command != "" && !strings.EqualFold(command, "none"):
		// Never ignored: the host might be reachable only through it, or reaching it directly might go
		// somewhere else.
		return sshHop{}, nil, fmt.Errorf("ssh client configuration sets ProxyCommand for %s, which the provider does not run: "+
			"use ProxyJump for a jump host (ProxyCommand ssh -W %%h:%%p bastion is ProxyJump bastion)", spec.alias)
	}
	return h, nil, nil
}

// expandHome reads a leading ~ as the user's home directory, as ssh does in file names.
func expandHome(path, home string) string {
	if path == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		return filepath.Join(home, rest)
	}
	return path
}

// localUser is who ssh logs in as when nothing names a user: $USER, else the account running the provider.
func localUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}
