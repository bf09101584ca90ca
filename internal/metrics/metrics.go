// Package metrics holds what every backend runs beside Squid to export the proxy's Prometheus metrics, and
// their names.
//
// Two kept, packaged programs do the work (issue 40): mtail (Debian's mtail) runs Program over the JSON access
// log (internal/proxyconf.LogFormatJSON) and counts requests by decision, reason and rule set, bytes each way,
// request durations and connect times; prometheus-squid-exporter (Debian's prometheus-squid-exporter) reads
// Squid's own counters from its cache manager, on loopback only. Neither needs code of this project on the proxy: a backend
// installs the packages and writes Program where mtail reads its programs.
package metrics

import _ "embed" // Program is embedded

// Program is the mtail program that turns the JSON access log into the egress_proxy_* metrics. mtail loads
// programs from a directory by the file name ProgramFile.
//
//go:embed egress_proxy.mtail
var Program []byte

// ProgramFile is the name Program is written under in mtail's program directory; mtail loads only files
// ending in .mtail.
const ProgramFile = "egress_proxy.mtail"

// The metrics Program exports. Alert rules and dashboards (examples/metrics) use these names: they are a
// stable interface, so add, never rename.
const (
	// RequestsTotal counts requests by decision, reason and rule_set.
	RequestsTotal = "egress_proxy_requests_total"
	// BytesTotal counts bytes by direction: DirectionToClient or DirectionFromClient.
	BytesTotal = "egress_proxy_bytes_total"
	// RequestDuration is a histogram of request durations in seconds, by kind: KindHTTP or KindTunnel.
	RequestDuration = "egress_proxy_request_duration_seconds"
	// ConnectDuration is a histogram of the time Squid took to connect to the destination, in seconds, by kind:
	// the access log's server_total_ms less its server_response_ms, where both are known.
	ConnectDuration = "egress_proxy_connect_duration_seconds"
	// HealthChecksTotal counts the readiness checks' requests, which RequestsTotal leaves out.
	HealthChecksTotal = "egress_proxy_health_checks_total"
	// LogLinesTotal counts the access log's lines mtail read, parsed or not.
	LogLinesTotal = "egress_proxy_log_lines_total"
	// LogLinesUnparsedTotal counts the lines Program could not read: the log's format and Program disagree.
	LogLinesUnparsedTotal = "egress_proxy_log_lines_unparsed_total"
)

// Label values of BytesTotal's direction and RequestDuration's kind.
const (
	DirectionToClient   = "to_client"
	DirectionFromClient = "from_client"
	KindHTTP            = "http"
	KindTunnel          = "tunnel"
)
