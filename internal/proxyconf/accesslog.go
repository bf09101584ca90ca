package proxyconf

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

// JSONLogFields are the JSON access log's field names, in the order every line has them. They are a stable
// interface: programs read them (a metrics exporter matches the line with a pattern), and
// docs/guides/access-log.md documents each. Add a field only at the end; never rename or reorder one.
var JSONLogFields = []string{
	"time", "client", "user", "cert_subject", "rule_set", "method", "host", "port",
	"decision", "reason", "status", "squid_status", "bytes_to_client", "bytes_from_client", "duration_ms", "server",
}
