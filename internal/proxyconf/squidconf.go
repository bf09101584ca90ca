package proxyconf

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Where Squid's files live on a Debian or Ubuntu VM. The pid file must match the PIDFile of the distribution's
// squid.service, or systemd loses track of the daemon.
const (
	ConfPath       = "/etc/squid/squid.conf"
	HtpasswdPath   = "/etc/squid/passwd"
	AuthHelperPath = "/usr/lib/squid/basic_ncsa_auth"
	PidFile        = "/run/squid.pid"
	TLSCertPath    = "/etc/squid/egress-tls.crt"
	TLSKeyPath     = "/etc/squid/egress-tls.key"
	// ClientCAPath and ClientCRLPath hold TLSSettings.ClientCAPEM and ClientCRLPEM beside the TLS
	// certificate: not secrets, but Squid reads them as the proxy's own.
	ClientCAPath  = "/etc/squid/egress-client-ca.crt"
	ClientCRLPath = "/etc/squid/egress-client-ca.crl"
	// OwnAddressesPath lists the VM's own addresses, one a line, written at boot (see RenderUserData).
	OwnAddressesPath = "/etc/squid/egress-own-addresses"
	AccessLogPath    = "/var/log/squid/access.log"
	CacheLogPath     = "/var/log/squid/cache.log"
	CoredumpDir      = "/var/spool/squid"
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

// The basic auth helpers. Each check is a bcrypt comparison, tens of milliseconds of CPU, and when every helper
// is busy Squid queues the request. Once the queue has stayed longer than queue-size for 3 minutes, Squid by
// default exits ("FATAL: Too many queued basicauthenticator requests"), so one client sending wrong passwords
// faster than the helpers check them would take the proxy down for everyone. on-persistent-overload=ERR
// answers the requests that arrive while that lasts as failed logins (407) instead; the queued ones are still
// checked. (Squid 5.7 reads the action case-sensitively: "err" is a fatal configuration error.)
//
// authHelpers: bcrypt is CPU-bound, so helpers beyond the machine's vCPUs (1 or 2 by default) only share them;
// 8 covers larger machines at about a megabyte each. Two start with Squid, and one is kept idle, so the first
// login after a quiet spell does not wait for a fork. authHelperQueue, four times the helpers (Squid's
// default is twice), absorbs a burst: a login queued behind a full queue waits about 32 checks, a few
// seconds on one vCPU, rather than being refused.
const (
	authHelpers     = 8
	authHelperQueue = 32
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
	HealthPort int
	// ManagerPort, when set, opens Squid's cache manager on 127.0.0.1 at this port, to local clients only, for
	// the metrics exporter (internal/metrics); zero opens none.
	ManagerPort    int
	HtpasswdPath   string
	AuthHelperPath string
	// PidFile may be "none" where nothing needs it (Squid in the foreground of a container).
	PidFile string
	// AccessLog is a Squid log destination such as "stdio:/var/log/squid/access.log", or
	// "udp://127.0.0.1:PORT" for a reader on the same machine (mtail, internal/metrics) where no file is kept.
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
	// TLSCertPath and TLSKeyPath are where the TLS listener's certificate chain and key are written.
	TLSCertPath, TLSKeyPath string
	// ClientCAPath and ClientCRLPath are where the client CA (TLSSettings.ClientCAPEM) and its CRL
	// (ClientCRLPEM) are written, when set. Added by the backends' side of issue 39 so that each guest
	// delivers the files where the renderer will name them; the renderer's use of them is the policy side's.
	ClientCAPath, ClientCRLPath string
	// OwnAddresses are the proxy machine's addresses where the backend knows them (a reserved external
	// address, a fixed internal one); the proxy refuses to connect to them. ListenAddress is always included.
	OwnAddresses []netip.Addr
	// OwnAddressesFile, when set, is a file of more own addresses, one a line, that the machine writes itself
	// before Squid starts: the addresses of its interfaces, which no backend knows before boot.
	OwnAddressesFile string

	// allowLoopbackDestinations lifts the loopback guard. Only tests set it (WithLoopbackDestinationsForTests):
	// their backends can only listen on loopback outside a network namespace.
	allowLoopbackDestinations bool
}

// WithDefaults is o with every empty field at the value RenderSquidConf gives it: where a guest's files are
// when its backend names none.
func (o RenderOptions) WithDefaults() RenderOptions {
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
	def(&o.TLSCertPath, TLSCertPath)
	def(&o.TLSKeyPath, TLSKeyPath)
	def(&o.ClientCAPath, ClientCAPath)
	def(&o.ClientCRLPath, ClientCRLPath)
	return o
}

// WithLoopbackDestinationsForTests is o with the loopback destination guard lifted, for tests alone: outside a
// network namespace of their own, the servers behind a test's proxy can only listen on loopback. The guards
// themselves are tested without it. Only _test.go files may call it (TestTestHooksOnlyInTests).
func (o RenderOptions) WithLoopbackDestinationsForTests() RenderOptions {
	o.allowLoopbackDestinations = true
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
	if o.ManagerPort != 0 {
		if err := ValidatePort(o.ManagerPort); err != nil {
			return fmt.Errorf("manager port: %w", err)
		}
		if o.ManagerPort == s.Port || o.ManagerPort == o.HealthPort {
			return fmt.Errorf("manager port %d is the proxy's or the health check's", o.ManagerPort)
		}
	}
	for name, v := range map[string]string{
		"htpasswd path": o.HtpasswdPath, "auth helper path": o.AuthHelperPath, "pid file": o.PidFile,
		"access log": o.AccessLog, "cache log": o.CacheLog, "coredump dir": o.CoredumpDir,
		"hosts file": o.HostsFile, "effective user": o.EffectiveUser,
		"TLS certificate path": o.TLSCertPath, "TLS key path": o.TLSKeyPath, "own addresses file": o.OwnAddressesFile,
		"client CA path": o.ClientCAPath, "client CRL path": o.ClientCRLPath,
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
	for _, a := range o.OwnAddresses {
		if !a.IsValid() {
			return fmt.Errorf("invalid own address")
		}
	}
	return nil
}

// accessLogFormat shows who went where and what happened, and deliberately not the URL path or query,
// which can carry credentials. server= is the address Squid connected to; reason= says which guard refused a
// request ("-" for none, or for a refusal by the allow-list, client ranges, ports or authentication). A proxy
// with a policy (rule sets, denied destinations, a client CA) logs policyLogFields after these, and a reason for
// every refusal and would-be refusal.
const accessLogFormat = `%ts.%03tu client=%>a user=%un method=%rm host=%>rd port=%>rP status=%>Hs squid=%Ss bytes=%<st server=%<a reason=%{reason}note`

// The reasons the access log gives for a refusal by a guard.
const (
	ReasonDestinationAddress = "destination_address_refused"
	ReasonClientConnections  = "too_many_client_connections"
)

// RenderSquidConf renders the complete squid.conf for s. It validates s first, so a value that could escape
// its directive never reaches the file.
//
// Squid applies the first http_access rule that matches, so the sections that write rules run in the order
// the checks must happen: health check, client ranges, connection limit, authentication, ports, destinations.
// With a policy: health check, client ranges, connection limit, authentication, the deny list and protocol
// guards, then the rule sets in order, then the fallback's ports and destinations.
func RenderSquidConf(s Settings, opts RenderOptions) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if err := opts.validate(s); err != nil {
		return nil, err
	}
	return renderSquidConf(s, opts), nil
}

// renderSquidConf renders validated settings and options.
func renderSquidConf(s Settings, opts RenderOptions) []byte {
	var w confWriter
	w.comment("Rendered by terraform-provider-egress. Do not edit: changes are replaced on the next apply.")
	n := notes{policy: s.annotated()}
	writeListening(&w, s, opts, n)
	writeClientRules(&w, s, n)
	if len(s.Users) > 0 {
		writeAuthentication(&w, opts, n)
	}
	if n.policy {
		writeDeniedDestinations(&w, s, n)
		writeProtocolRules(&w, n)
		writeGuardACLs(&w, s, opts)
		writeRuleSets(&w, s, opts, n)
		writeFallback(&w, s, opts, n)
	} else {
		writePortRules(&w, s)
		writeDestinationRules(&w, s, opts)
	}
	// Whatever no rule above allowed: with a policy, only a fallback request outside allowed_destinations
	// gets here.
	w.access("deny", []string{"all"}, n.of(DecisionDeny, ReasonDestinationNotAllowed, ""))
	writeNoCache(&w)
	writePrivacy(&w)
	writeTimeouts(&w, s.Timeouts.withDefaults())
	writeFilesAndLogs(&w, s, opts, n)
	return w.buf.Bytes()
}

// writeListening opens the proxy port and the health port, and gives the health port its own rules ahead of
// every other: it answers the health check and nothing else.
func writeListening(w *confWriter, s Settings, opts RenderOptions, n notes) {
	if s.TLS != nil {
		w.comment("Listening. The proxy port speaks TLS only, so credentials never cross the network in clear; the health port serves only the health check, to anyone.")
		args := []string{listenSpec(opts.ListenAddress, s.Port), "tls-cert=" + opts.TLSCertPath, "tls-key=" + opts.TLSKeyPath, "tls-min-version=1.2"}
		if s.hasClientCA() {
			// clientca= both names the CAs in the handshake's certificate request and makes a certificate one of
			// them signed a condition of the handshake (without sslflags=CONDITIONAL_AUTH, Squid asks OpenSSL to
			// fail a client that sends none). crlfile= turns on revocation checks of the client's certificate.
			args = append(args, "clientca="+opts.ClientCAPath)
			if s.TLS.ClientCRLPEM != "" {
				args = append(args, "crlfile="+opts.ClientCRLPath)
			}
		}
		w.line("https_port", args...)
	} else {
		w.comment("Listening. The health port serves only the health check, to anyone.")
		w.line("http_port", listenSpec(opts.ListenAddress, s.Port))
	}
	w.line("http_port", listenSpec(opts.ListenAddress, opts.HealthPort))
	w.line("acl", "health_port", "localport", strconv.Itoa(opts.HealthPort))
	w.line("acl", "health_host", "dstdomain", "-n", VisibleHostname)
	w.line("acl", "health_path", "urlpath_regex", "^"+strings.ReplaceAll(HealthPath, ".", `\.`)+"$")
	w.line("acl", "GET", "method", "GET")
	if n.policy {
		writeDecisionACLs(w)
	}
	w.access("allow", []string{"health_port", "GET", "health_host", "health_path"}, n.of(DecisionAllow, "", ""))
	w.access("deny", []string{"health_port"}, n.of(DecisionDeny, ReasonHealthPortOnly, ""))
	if opts.ManagerPort != 0 {
		writeManagerPort(w, opts, n)
	}
}

// writeManagerPort opens Squid's cache manager on a port of 127.0.0.1 of its own, for the metrics exporter on
// the same machine: it answers cache manager requests from local clients there and nothing else, whatever the
// client ranges say, and the proxy port keeps refusing the manager to everyone. Its requests stay out of the
// access log (writeFilesAndLogs): they are no client's, and would count as allowed requests every scrape.
func writeManagerPort(w *confWriter, opts RenderOptions, n notes) {
	w.comment("The cache manager, for the metrics exporter on this machine only.")
	w.line("http_port", listenSpec(netip.MustParseAddr("127.0.0.1"), opts.ManagerPort))
	w.line("acl", "manager_port", "localport", strconv.Itoa(opts.ManagerPort))
	w.access("allow", []string{"manager_port", "manager", "localhost"}, n.of(DecisionAllow, "", ""))
	w.access("deny", []string{"manager_port"}, n.of(DecisionDeny, ReasonProtocolNotAllowed, ""))
}

// writeClientRules refuses clients outside allowed_client_cidrs, and clients over their connection limit.
func writeClientRules(w *confWriter, s Settings, n notes) {
	w.comment("Clients outside allowed_client_cidrs are refused before anything else is looked at.")
	if len(s.AllowedClientCIDRs) > 0 {
		w.acl("clients", "src", squidClientPrefixes(s.AllowedClientCIDRs))
		w.access("deny", []string{"!clients"}, n.of(DecisionDeny, ReasonClientNotAllowed, ""))
	} else {
		w.access("deny", []string{"all"}, n.of(DecisionDeny, ReasonClientNotAllowed, ""))
	}

	// maxconn matches when the client already holds more connections than the limit: the request on the
	// connection beyond it is refused with a 403 and a reason in the log. client_ip_max_connections is the
	// hard stop at twice the limit, for a client that opens connections and sends nothing on them; Squid closes
	// those without an answer.
	w.comment("At most max_connections_per_client connections from one client address.")
	w.line("acl", "client_over_limit", "maxconn", strconv.Itoa(s.maxConnectionsPerClient()))
	w.line("acl", "reason_client_connections", "annotate_transaction", "reason="+ReasonClientConnections)
	w.access("deny", []string{"client_over_limit"}, n.of(DecisionDeny, ReasonClientConnections, ""))
	w.line("client_ip_max_connections", strconv.Itoa(2*s.maxConnectionsPerClient()))
}

// writeAuthentication requires proxy basic authentication. It comes before the destination check so that
// unauthenticated clients learn nothing about the allow-list.
func writeAuthentication(w *confWriter, opts RenderOptions, n notes) {
	w.comment("Proxy basic authentication against an htpasswd file of bcrypt hashes.")
	w.line("auth_param", "basic", "program", opts.AuthHelperPath, opts.HtpasswdPath)
	w.line("auth_param", "basic", "children", strconv.Itoa(authHelpers), "startup=2", "idle=1",
		"queue-size="+strconv.Itoa(authHelperQueue), "on-persistent-overload=ERR")
	w.line("auth_param", "basic", "realm", "egress-proxy")
	// Without this Squid lowercases the name and a user "Alice" never matches the file.
	w.line("auth_param", "basic", "casesensitive", "on")
	w.line("auth_param", "basic", "credentialsttl", "5", "minutes")
	w.line("acl", "authenticated", "proxy_auth", "REQUIRED")
	if n.policy {
		// A request without valid credentials stops at the next line before any note after it is evaluated
		// (Squid answers the challenge at once), and a note there would also turn the 407 into a 403. So the
		// decision is noted ahead, on a line that never matches (!all); every line that decides later replaces it.
		w.access("deny", append(n.of(DecisionDeny, ReasonAuthentication, ""), "!all"), nil)
	}
	w.line("http_access", "deny", "!authenticated")
}

// writePortRules limits CONNECT to the allowed ports and plain HTTP to port 80 and those, and refuses Squid's
// cache manager.
func writePortRules(w *confWriter, s Settings) {
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
}

// writeDestinationRules allows the allow-list's destinations, except where they resolve to an address the
// guards refuse. Without destinations it writes no rule: the final "deny all" refuses everything.
//
// dstdomain matches the host name the client asked for, before any DNS lookup, so a refusal never depends
// on resolution; -n stops Squid from reverse-resolving IP literals into an allowed name.
func writeDestinationRules(w *confWriter, s Settings, opts RenderOptions) {
	dests := collapseDestinations(s.AllowedDestinations)
	if len(dests) == 0 {
		w.comment("No allowed destinations: every request is refused.")
		return
	}
	w.comment("Destinations: exact host names, and .domain for the domain and all its subdomains.")
	w.acl("destinations", "dstdomain -n", dests)
	// The dst ACL looks the name up in Squid's DNS cache, the same entry Squid then connects from, and
	// matches when any one of its addresses is in the list, so a name with one refused address among
	// others is refused. It is checked after the allow-list, so names nobody allowed are never looked up.
	w.comment("Destination address guards: whatever the allow-list says, never loopback, link-local, unspecified, the proxy's own addresses, or private ranges outside allowed_private_cidrs.")
	own := append([]netip.Addr{opts.ListenAddress}, opts.OwnAddresses...)
	w.acl("refused_destinations", "dst", refusedDestinations(s.AllowedPrivateCIDRs, own, opts.allowLoopbackDestinations))
	w.line("acl", "reason_destination_address", "annotate_transaction", "reason="+ReasonDestinationAddress)
	w.line("http_access", "deny", "destinations", "refused_destinations", "reason_destination_address")
	if opts.OwnAddressesFile != "" {
		w.line("acl", "own_addresses", "dst", `"`+opts.OwnAddressesFile+`"`)
		w.line("http_access", "deny", "destinations", "own_addresses", "reason_destination_address")
	}
	w.line("http_access", "allow", "destinations")
}

// writeNoCache turns off everything a caching proxy would store or announce.
func writeNoCache(w *confWriter) {
	w.comment("A forward proxy only: nothing is stored.")
	w.line("cache", "deny", "all")
	w.line("netdb_filename", "none")
	w.line("icp_port", "0")
	w.line("htcp_port", "0")
	w.line("pinger_enable", "off")
}

// writePrivacy keeps Squid from naming itself or the client in headers and error pages.
func writePrivacy(w *confWriter) {
	w.comment("Tell neither the destination nor the client more than needed.")
	w.line("via", "off")
	w.line("forwarded_for", "delete")
	w.line("httpd_suppress_version_string", "on")
	w.line("visible_hostname", VisibleHostname)
	w.line("email_err_data", "off")
	w.line("reply_header_access", "X-Cache", "deny", "all")
	w.line("reply_header_access", "X-Cache-Lookup", "deny", "all")
	w.line("reply_header_access", "X-Squid-Error", "deny", "all")
}

func writeTimeouts(w *confWriter, t Timeouts) {
	w.comment("Timeouts: a client cannot hold a connection without sending, nor a destination without answering.")
	w.line("request_timeout", seconds(t.RequestHeaders))
	w.line("client_idle_pconn_timeout", seconds(t.RequestHeaders))
	w.line("connect_timeout", seconds(t.Connect))
	w.line("read_timeout", seconds(t.Idle))
	// A cached DNS answer is kept at least this long (Squid's lower bound on positive answers too), so the
	// address the guards checked is the one the connection uses, even for a name published with TTL 0.
	w.line("negative_dns_ttl", "60", "seconds")
}

// writeFilesAndLogs says where Squid's files are on this machine (RenderOptions), how it resolves names, and
// how it stops.
func writeFilesAndLogs(w *confWriter, s Settings, opts RenderOptions, n notes) {
	w.comment("Files and logs.")
	switch {
	case s.LogFormat == LogFormatJSON:
		w.line("logformat", "egress", jsonLogFormat)
	case n.policy:
		w.line("logformat", "egress", accessLogFormat+policyLogFields)
	default:
		w.line("logformat", "egress", accessLogFormat)
	}
	args := []string{opts.AccessLog, "egress"}
	if strings.HasPrefix(opts.AccessLog, "udp://") {
		// Squid's UDP log module holds lines until its buffer fills (8 KB by default), so a quiet proxy's
		// lines would reach the reader (mtail) minutes late; with no buffer each line is a datagram of its
		// own. Squid 5.7 refuses a size without its unit.
		args = []string{opts.AccessLog, "logformat=egress", "buffer-size=0KB"}
	}
	if opts.ManagerPort != 0 {
		args = append(args, "!manager_port")
	}
	w.line("access_log", args...)
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

func seconds(d time.Duration) string {
	return strconv.Itoa(int(d/time.Second)) + " seconds"
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
