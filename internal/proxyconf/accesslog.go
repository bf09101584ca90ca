package proxyconf

import (
	"fmt"
	"strings"
)

// The access log's formats (issue 40). Every proxy made before the JSON line existed keeps the text line, so
// that its rendered squid.conf, and whatever reads its log, stays as it was (TestExistingConfigsRenderAsBefore);
// a proxy asks for the JSON line with Settings.LogFormat.

// LogFormat is the access log's format. The zero value is LogFormatText.
type LogFormat string

const (
	// LogFormatText is the key=value line every proxy logged before LogFormat existed, unchanged.
	LogFormatText LogFormat = "text"
	// LogFormatJSON is one JSON object a line, with the fields JSONLogFields name, in that order.
	LogFormatJSON LogFormat = "json"
)

// LogFormats are the formats Settings.LogFormat accepts, as the provider's schema offers them.
var LogFormats = []LogFormat{LogFormatJSON, LogFormatText}

// ValidateLogFormat reports whether f is not a format the renderer writes ("" is LogFormatText).
func ValidateLogFormat(f LogFormat) error {
	switch f {
	case "", LogFormatText, LogFormatJSON:
		return nil
	}
	return fmt.Errorf("log format %q must be %q or %q", string(f), LogFormatJSON, LogFormatText)
}

// annotated reports whether s renders the layout in which every http_access line notes its decision and
// reason (squidconf_policy.go): a proxy with a policy does, and so does one that logs JSON, whose every line
// carries a decision. A text proxy without a policy keeps the layout it always had.
func (s Settings) annotated() bool {
	return s.hasPolicy() || s.LogFormat == LogFormatJSON
}

// jsonLogField is one field of the JSON line: its name, and the Squid logformat code of its value.
//
// The line must be valid JSON whatever a client sends. Squid 5.7's %"..." encoding escapes quotes and
// backslashes but writes control bytes other than CR, LF and TAB as they are, which JSON forbids; its %#
// encoding (URL encoding) writes every control byte, space, quote, backslash and byte above 0x7e as %XX, so a
// value under it can hold nothing JSON must escape. Every string field that a client can put anything into
// (user, certificate subject, method, host) is therefore %#-encoded, and so is every other string field, so
// a reader decodes them all alike. A number is a bare JSON number only where Squid always prints digits;
// where it may print "-" (nothing known), the field is a string.
type jsonLogField struct {
	name   string
	code   string
	number bool
}

// jsonLogFields are the JSON line's fields in order; docs/guides/access-log.md documents each, and
// TestJSONAccessLogOnSquid holds them to what Squid writes.
var jsonLogFields = []jsonLogField{
	{name: "time", code: "%ts.%03tu", number: true},
	{name: "client", code: "%#>a"},
	{name: "user", code: "%#ul"},
	{name: "cert_subject", code: "%#ssl::>cert_subject"},
	{name: "rule_set", code: "%#{ruleset}note"},
	{name: "method", code: "%#rm"},
	{name: "host", code: "%#>rd"},
	{name: "port", code: "%#>rP"},
	{name: "decision", code: "%#{decision}note"},
	{name: "reason", code: "%#{reason}note"},
	{name: "status", code: "%>Hs", number: true},
	{name: "squid_status", code: "%#Ss"},
	{name: "bytes_to_client", code: "%<st", number: true},
	{name: "bytes_from_client", code: "%>st", number: true},
	{name: "duration_ms", code: "%tr", number: true},
	{name: "server", code: "%#<a"},
	// Squid's timers of its exchange with the server, "-" where it contacted none. server_total_ms runs from its
	// first connect attempt to its last I/O with the server; server_response_ms from the moment the request
	// was sent (the tunnel opened, for a CONNECT) to the last byte received. Their difference is the time to
	// connect, which Squid 5.7 does not log by itself (the metrics' connect histogram is computed so).
	{name: "server_total_ms", code: "%#<tt"},
	{name: "server_response_ms", code: "%#<pt"},
}

// JSONLogFields are the JSON access log's field names, in the order every line has them. They are a stable
// interface: programs read them (a metrics exporter matches the line with a pattern), and
// docs/guides/access-log.md documents each. Add a field only at the end; never rename or reorder one.
var JSONLogFields = func() []string {
	var names []string
	for _, f := range jsonLogFields {
		names = append(names, f.name)
	}
	return names
}()

// jsonLogFormat is the logformat of the JSON line. It holds no space, so that it stays one token of the
// logformat directive (a guest that checks a config token by token reads it as one), and no quote at the
// start of a token, which a guest would take for a file name.
var jsonLogFormat = func() string {
	var b strings.Builder
	for i, f := range jsonLogFields {
		if i > 0 {
			b.WriteByte(',')
		} else {
			b.WriteByte('{')
		}
		if f.number {
			fmt.Fprintf(&b, "%q:%s", f.name, f.code)
		} else {
			fmt.Fprintf(&b, "%q:\"%s\"", f.name, f.code)
		}
	}
	b.WriteByte('}')
	return b.String()
}()
