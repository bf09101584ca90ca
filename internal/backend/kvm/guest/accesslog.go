package guest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Squid's access log on a kvm proxy (issue 40): the file stays where Squid writes it (other readers, such as a
// log-to-metrics tool, follow it there), and rsyslog follows it into the journal and, when the proxy has a
// syslog target, to that target.
//
// Why rsyslog's imfile and not Squid's own syslog module or a `tail -F` service: imfile keeps its position in
// the file across its own restarts and the VM's reboots (a state file in its work directory), so every line
// reaches the journal once, none twice, also the ones Squid wrote before rsyslog started; it follows the file
// across a rotation; and it sends each line as one message, as written (maxMessageSize in the image's
// rsyslog.conf is far above any access log line). The same daemon forwards (omfwd), so one reader of the file
// serves both, and Squid's configuration, shared by every backend, is not touched.

// RsyslogConfPath is the rsyslog drop-in RenderAccessLog's text goes to. rsyslog reads /etc/rsyslog.d/*.conf.
const RsyslogConfPath = "/etc/rsyslog.d/60-egress-access-log.conf"

// JournalIdentifier is the SYSLOG_IDENTIFIER the access log's lines carry in the journal:
// `journalctl -t squid-access -o cat` prints them as Squid wrote them.
const JournalIdentifier = "squid-access"

// accessLogFile is where Squid writes its access log on Debian and Ubuntu (proxyconf renders it there).
const accessLogFile = "/var/log/squid/access.log"

// SyslogSchemes are the transports a syslog target may name.
var SyslogSchemes = []string{"udp", "tcp"}

// SyslogTarget is where the access log is forwarded: protocol (udp or tcp), host and port.
type SyslogTarget struct {
	Protocol string
	Host     string
	Port     int
}

// String is the target in the form ParseSyslogTarget reads.
func (t SyslogTarget) String() string {
	return t.Protocol + "://" + net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
}

// dnsNameRE is a DNS name of letters, digits, hyphens and dots: what rsyslog resolves, and nothing that could
// leave the quoted string of its configuration.
var dnsNameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

// ParseSyslogTarget reads "udp://HOST:PORT" or "tcp://HOST:PORT": HOST an IPv4 address, an IPv6 address in
// brackets or a DNS name, PORT 1 to 65535, and nothing else (no user, path, query or fragment).
func ParseSyslogTarget(s string) (SyslogTarget, error) {
	forms := make([]string, len(SyslogSchemes))
	for i, scheme := range SyslogSchemes {
		forms[i] = scheme + "://HOST:PORT"
	}
	want := fmt.Sprintf("syslog target %q must be %s", s, strings.Join(forms, " or "))
	u, err := url.Parse(s)
	if err != nil {
		return SyslogTarget{}, fmt.Errorf("%s: %w", want, err)
	}
	var t SyslogTarget
	switch {
	case u.Scheme != "udp" && u.Scheme != "tcp":
		return t, fmt.Errorf("%s: the scheme is %q", want, u.Scheme)
	case u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return t, fmt.Errorf("%s, with nothing after the port", want)
	case u.Port() == "":
		return t, fmt.Errorf("%s: it names no port", want)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return t, fmt.Errorf("%s: port %q is not between 1 and 65535", want, u.Port())
	}
	host := u.Hostname()
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return t, fmt.Errorf("%s: an IPv6 address goes in brackets, [%s]", want, host)
	}
	if ip := net.ParseIP(host); ip == nil && (len(host) > 253 || !dnsNameRE.MatchString(host) || strings.Contains(host, ":")) {
		return t, fmt.Errorf("%s: host %q is neither an IP address nor a DNS name", want, host)
	}
	return SyslogTarget{Protocol: u.Scheme, Host: host, Port: port}, nil
}

// RenderAccessLog renders the rsyslog drop-in that follows Squid's access log into the journal, under
// JournalIdentifier, and forwards every line to target when there is one. Lines go to the journal whether or
// not the target is reachable: forwarding has a queue of its own, in memory and bounded, which rsyslog keeps
// trying to empty; what does not fit while the target is away is dropped there, never in the journal.
func RenderAccessLog(target *SyslogTarget) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by terraform-provider-egress: Squid's access log, one message a line, into the journal\n")
	fmt.Fprintf(&b, "# (journalctl -t %s)", JournalIdentifier)
	if target != nil {
		b.WriteString(" and to the proxy's syslog target")
	}
	b.WriteString(". Do not edit: changes are replaced on the next apply.\n")
	b.WriteString("module(load=\"imfile\")\n")
	b.WriteString("module(load=\"omjournal\")\n")
	fmt.Fprintf(&b, "input(type=\"imfile\" file=%q tag=%q facility=\"local4\" severity=\"info\"\n", accessLogFile, JournalIdentifier)
	b.WriteString("      reopenOnTruncate=\"on\" ruleset=\"egress_access_log\")\n")
	b.WriteString("ruleset(name=\"egress_access_log\") {\n")
	b.WriteString("  action(type=\"omjournal\")\n")
	if target != nil {
		// RFC 5424 framing: the receiver reads the host and tag from the header and the line, as Squid wrote
		// it, as the message. Over TCP one message a line (the lines hold no newline).
		fmt.Fprintf(&b, "  action(type=\"omfwd\" target=%q port=\"%d\" protocol=%q template=\"RSYSLOG_SyslogProtocol23Format\"\n",
			target.Host, target.Port, target.Protocol)
		b.WriteString("         queue.type=\"LinkedList\" queue.size=\"10000\" action.resumeRetryCount=\"-1\")\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// RsyslogDropInPath lifts journald's rate limit for rsyslog.service, which sends the access log's lines: a
// busy proxy writes more than journald's default burst (10,000 messages in 30 seconds per unit), and journald
// would drop the rest without a trace in the journal. The journal's size cap still bounds what it keeps.
const RsyslogDropInPath = "/etc/systemd/system/rsyslog.service.d/60-egress-access-log.conf"

var rsyslogDropIn = []byte(`# Written by terraform-provider-egress: every access log line rsyslog sends is kept by the journal.
[Service]
LogRateLimitIntervalSec=0
`)

// RsyslogIfMissing installs rsyslog on an image that lacks it, such as a plain Debian cloud image, and
// (re)starts it so it reads RsyslogConfPath; on the project's image, which has it, it only restarts it. It
// runs after Squid's restart, so a slow or failed install never delays the proxy. A fixed line with no user
// value and no quote (single-quoted in YAML).
const RsyslogIfMissing = "command -v rsyslogd >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y rsyslog; }; systemctl restart rsyslog"
