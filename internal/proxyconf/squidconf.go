package proxyconf

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Where Squid's files live on a Debian or Ubuntu VM. The pid file must match the PIDFile of the distribution's
// squid.service, or systemd loses track of the daemon.
const (
	ConfPath       = "/etc/squid/squid.conf"
	HtpasswdPath   = "/etc/squid/passwd"
	AuthHelperPath = "/usr/lib/squid/basic_ncsa_auth"
	PidFile        = "/run/squid.pid"
	AccessLogPath  = "/var/log/squid/access.log"
	CacheLogPath   = "/var/log/squid/cache.log"
	CoredumpDir    = "/var/spool/squid"
)

// Health check. A second listening port, DefaultHealthPort, answers exactly one request, HTTP GET HealthPath,
// with 200, from any client, and refuses everything else, so it can never be used as a proxy. The path is one
// of Squid's built-in icons, which plain Squid serves from memory without a cache or any extra program: a 200
// means the daemon is up, has parsed its config and accepts connections. Readiness checks (Kubernetes probe,
// GCE health check, the KVM backend's poll) use it instead of the proxy port, because their source address
// is usually outside allowed_client_cidrs.
const (
	DefaultHealthPort = 3129
	HealthPath        = "/squid-internal-static/icons/SN.png"
)

// VisibleHostname is the name Squid puts in error pages and internal URLs instead of the machine's own name.
// The reserved .invalid domain never resolves, so a request naming it can only be served by Squid itself.
const VisibleHostname = "egress-proxy.invalid"

// RenderOptions are where things are on the machine that runs Squid. The zero value means a Debian or
// Ubuntu VM; tests point every path into a temporary directory.
type RenderOptions struct {
	// ListenAddress restricts both ports to one address; the zero value listens on every interface.
	ListenAddress netip.Addr
	// HealthPort defaults to DefaultHealthPort.
	HealthPort     int
	HtpasswdPath   string
	AuthHelperPath string
	// PidFile may be "none" where nothing needs it (Squid in the foreground of a container).
	PidFile string
	// AccessLog is a Squid log destination such as "stdio:/var/log/squid/access.log".
	AccessLog string
	// CacheLog is a file name, not a log destination: Squid takes no "stdio:" prefix here.
	CacheLog    string
	CoredumpDir string
	// HostsFile replaces /etc/hosts for name resolution; tests map their domains to loopback with it.
	HostsFile string
	// DNSNameservers replace /etc/resolv.conf when set.
	DNSNameservers []netip.Addr
	// EffectiveUser is the account Squid drops to when started as root; empty keeps the build's default
	// ("proxy" on Debian and Ubuntu).
	EffectiveUser string
}

func (o RenderOptions) withDefaults() RenderOptions {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	if o.HealthPort == 0 {
		o.HealthPort = DefaultHealthPort
	}
	def(&o.HtpasswdPath, HtpasswdPath)
	def(&o.AuthHelperPath, AuthHelperPath)
	def(&o.PidFile, PidFile)
	def(&o.AccessLog, "stdio:"+AccessLogPath)
	def(&o.CacheLog, CacheLogPath)
	def(&o.CoredumpDir, CoredumpDir)
	return o
}

// validate guards the options the same way Validate guards Settings: these are set by backends and tests,
// not users, but a space or newline would still split a directive.
func (o RenderOptions) validate(s Settings) error {
	if err := ValidatePort(o.HealthPort); err != nil {
		return fmt.Errorf("health port: %w", err)
	}
	if o.HealthPort == s.Port {
		return fmt.Errorf("port %d is reserved for the health check", s.Port)
	}
	for name, v := range map[string]string{
		"htpasswd path": o.HtpasswdPath, "auth helper path": o.AuthHelperPath, "pid file": o.PidFile,
		"access log": o.AccessLog, "cache log": o.CacheLog, "coredump dir": o.CoredumpDir,
		"hosts file": o.HostsFile, "effective user": o.EffectiveUser,
	} {
		for _, r := range v {
			if r <= ' ' || r == 0x7f || r == '#' || r == '"' || r == '\'' || r == '\\' {
				return fmt.Errorf("%s %q must not contain spaces, quotes, '#', '\\' or control characters", name, v)
			}
		}
	}
	for _, a := range o.DNSNameservers {
		if !a.IsValid() {
			return fmt.Errorf("invalid DNS nameserver address")
		}
	}
	return nil
}

// accessLogFormat shows who went where and what happened, and deliberately not the URL path or query,
// which can carry credentials.
const accessLogFormat = `%ts.%03tu client=%>a user=%un method=%rm host=%>rd port=%>rP status=%>Hs squid=%Ss bytes=%<st`

// RenderSquidConf renders the complete squid.conf for s. It validates s first, so a value that could escape
// its directive never reaches the file.
func RenderSquidConf(s Settings, opts RenderOptions) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := opts.validate(s); err != nil {
		return nil, err
	}
	var w confWriter
	w.comment("Rendered by terraform-provider-egress. Do not edit: changes are replaced on the next apply.")

	w.comment("Listening. The health port serves only the health check, to anyone.")
	w.line("http_port", listenSpec(opts.ListenAddress, s.Port))
	w.line("http_port", listenSpec(opts.ListenAddress, opts.HealthPort))
	w.line("acl", "health_port", "localport", strconv.Itoa(opts.HealthPort))
	w.line("acl", "health_host", "dstdomain", "-n", VisibleHostname)
	w.line("acl", "health_path", "urlpath_regex", "^"+strings.ReplaceAll(HealthPath, ".", `\.`)+"$")
	w.line("acl", "GET", "method", "GET")
	w.line("http_access", "allow", "health_port", "GET", "health_host", "health_path")
	w.line("http_access", "deny", "health_port")

	w.comment("Clients outside allowed_client_cidrs are refused before anything else is looked at.")
	if len(s.AllowedClientCIDRs) > 0 {
		w.acl("clients", "src", squidClientPrefixes(s.AllowedClientCIDRs))
		w.line("http_access", "deny", "!clients")
	} else {
		w.line("http_access", "deny", "all")
	}

	if s.Auth != nil {
		// Authentication comes before the destination check so that unauthenticated clients learn nothing
		// about the allow-list.
		w.comment("Proxy basic authentication against an htpasswd file of bcrypt hashes.")
		w.line("auth_param", "basic", "program", opts.AuthHelperPath, opts.HtpasswdPath)
		w.line("auth_param", "basic", "children", "5", "startup=1", "idle=1")
		w.line("auth_param", "basic", "realm", "egress-proxy")
		// Without this Squid lowercases the name and a user "Alice" never matches the file.
		w.line("auth_param", "basic", "casesensitive", "on")
		w.line("auth_param", "basic", "credentialsttl", "5", "minutes")
		w.line("acl", "authenticated", "proxy_auth", "REQUIRED")
		w.line("http_access", "deny", "!authenticated")
	}

	connectPorts := s.AllowedPorts
	if len(connectPorts) == 0 {
		connectPorts = DefaultConnectPorts
	}
	w.comment("CONNECT only to allowed_ports; plain http:// only to port 80 and allowed_ports.")
	w.line("acl", "CONNECT", "method", "CONNECT")
	w.acl("connect_ports", "port", portList(connectPorts))
	w.acl("http_ports", "port", portList(append([]int{80}, connectPorts...)))
	w.line("acl", "http_scheme", "proto", "HTTP")
	w.line("http_access", "deny", "CONNECT", "!connect_ports")
	w.line("http_access", "deny", "!CONNECT", "!http_scheme")
	w.line("http_access", "deny", "!CONNECT", "!http_ports")
	w.line("http_access", "deny", "manager")

	// dstdomain matches the host name the client asked for, before any DNS lookup, so a refusal never depends
	// on resolution; -n stops Squid from reverse-resolving IP literals into an allowed name.
	if dests := collapseDestinations(s.AllowedDestinations); len(dests) > 0 {
		w.comment("Destinations: exact host names, and .domain for the domain and all its subdomains.")
		w.acl("destinations", "dstdomain -n", dests)
		w.line("http_access", "allow", "destinations")
	} else {
		w.comment("No allowed destinations: every request is refused.")
	}
	w.line("http_access", "deny", "all")

	w.comment("A forward proxy only: nothing is stored.")
	w.line("cache", "deny", "all")
	w.line("netdb_filename", "none")
	w.line("icp_port", "0")
	w.line("htcp_port", "0")
	w.line("pinger_enable", "off")

	w.comment("Tell neither the destination nor the client more than needed.")
	w.line("via", "off")
	w.line("forwarded_for", "delete")
	w.line("httpd_suppress_version_string", "on")
	w.line("visible_hostname", VisibleHostname)
	w.line("email_err_data", "off")
	w.line("reply_header_access", "X-Cache", "deny", "all")
	w.line("reply_header_access", "X-Cache-Lookup", "deny", "all")
	w.line("reply_header_access", "X-Squid-Error", "deny", "all")

	w.comment("Files and logs.")
	w.line("logformat", "egress", accessLogFormat)
	w.line("access_log", opts.AccessLog, "egress")
	w.line("cache_log", opts.CacheLog)
	w.line("pid_filename", opts.PidFile)
	w.line("coredump_dir", opts.CoredumpDir)
	if opts.HostsFile != "" {
		w.line("hosts_file", opts.HostsFile)
	}
	if len(opts.DNSNameservers) > 0 {
		var ns []string
		for _, a := range opts.DNSNameservers {
			ns = append(ns, a.String())
		}
		w.line("dns_nameservers", ns...)
	}
	if opts.EffectiveUser != "" {
		w.line("cache_effective_user", opts.EffectiveUser)
	}
	// Stopping waits this long for open connections; the default 30 s slows every restart and rollout.
	w.line("shutdown_lifetime", "3", "seconds")
	return w.buf.Bytes(), nil
}

// confWriter writes one directive per line. Every argument has been validated to hold no whitespace or
// comment character, which is what keeps a value inside its directive.
type confWriter struct{ buf bytes.Buffer }

func (w *confWriter) comment(text string) {
	if w.buf.Len() > 0 {
		w.buf.WriteByte('\n')
	}
	w.buf.WriteString("# " + text + "\n")
}

func (w *confWriter) line(directive string, args ...string) {
	w.buf.WriteString(directive)
	for _, a := range args {
		w.buf.WriteByte(' ')
		w.buf.WriteString(a)
	}
	w.buf.WriteByte('\n')
}

// maxLineLen keeps every line far below the 8 KB at which Squid silently splits a config line and reads the
// rest as a directive of its own: with long enough lists, a destination named "acl" followed by "clients src all"
// would otherwise become a directive.
const maxLineLen = 1024

// acl writes values over as many lines as needed; Squid adds up the values of repeated acl lines of one name.
func (w *confWriter) acl(name, typ string, values []string) {
	head := "acl " + name + " " + typ
	line := head
	for i, v := range values {
		if i > 0 && len(line)+1+len(v) > maxLineLen {
			w.buf.WriteString(line + "\n")
			line = head
		}
		line += " " + v
	}
	w.buf.WriteString(line + "\n")
}

func listenSpec(addr netip.Addr, port int) string {
	if !addr.IsValid() {
		return strconv.Itoa(port)
	}
	return netip.AddrPortFrom(addr, uint16(port)).String()
}

func portList(ports []int) []string {
	seen := map[int]bool{}
	var out []string
	for _, p := range ports {
		if !seen[p] {
			seen[p] = true
			out = append(out, strconv.Itoa(p))
		}
	}
	return out
}

// collapseDestinations drops every entry already covered by a ".domain" entry. Squid refuses to start when one
// dstdomain ACL holds both ".example.com" and "example.com", and warns about "a.example.com", although the user
// meant nothing wrong; the collapsed list allows exactly the same names.
func collapseDestinations(ds []string) []string {
	suffixes := map[string]bool{}
	for _, d := range ds {
		if strings.HasPrefix(d, ".") {
			suffixes[d[1:]] = true
		}
	}
	// coveredBy reports whether a suffix entry matches name itself or one of its parent domains.
	covered := func(name string, includeSelf bool) bool {
		if includeSelf && suffixes[name] {
			return true
		}
		for i := strings.IndexByte(name, '.'); i >= 0; i = strings.IndexByte(name, '.') {
			name = name[i+1:]
			if suffixes[name] {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range ds {
		if seen[d] {
			continue
		}
		seen[d] = true
		if name, isSuffix := strings.CutPrefix(d, "."); isSuffix {
			if covered(name, false) {
				continue
			}
		} else if covered(d, true) {
			continue
		}
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
