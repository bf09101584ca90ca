package proxyconf

import (
	"errors"
	"fmt"
)

// Prometheus metrics (issue 40; internal/metrics says what serves them and why). mtail counts the JSON access
// log and serves egress_proxy_*; prometheus-squid-exporter reads Squid's cache manager and serves squid_*.
// Each listens on a port of its own, which only the metrics clients may reach: the counters name rule sets
// and refusal reasons, which the proxy's own clients have no business reading.
const (
	// DefaultMetricsPort is mtail's own default port.
	DefaultMetricsPort = 3903
	// DefaultSquidMetricsPort is prometheus-squid-exporter's own default port.
	DefaultSquidMetricsPort = 9301
	// DefaultManagerPort is where a proxy with metrics opens Squid's cache manager, on 127.0.0.1 only, for
	// the exporter (RenderOptions.ManagerPort).
	DefaultManagerPort = 3130
	// MetricsPath is where both servers answer.
	MetricsPath = "/metrics"
)

// MetricsSettings turn the proxy's metrics on. Omitted from JSON when unset (a pointer in Settings), so the
// settings a backend kept for a proxy made before metrics read back as they were.
type MetricsSettings struct {
	// Port serves egress_proxy_* (mtail); 0 means DefaultMetricsPort.
	Port int `json:",omitempty"`
	// SquidPort serves squid_* (the exporter); 0 means DefaultSquidMetricsPort.
	SquidPort int `json:",omitempty"`
	// AllowedClientCIDRs may scrape both ports, and nobody else: not the proxy's clients unless listed here.
	AllowedClientCIDRs []string
}

// Ports are the metrics ports, defaults filled in.
func (m MetricsSettings) Ports() (metrics, squid int) {
	metrics, squid = m.Port, m.SquidPort
	if metrics == 0 {
		metrics = DefaultMetricsPort
	}
	if squid == 0 {
		squid = DefaultSquidMetricsPort
	}
	return metrics, squid
}

// ValidateMetricsPort reports why p cannot be a metrics port, or nil: a TCP port that is none of the proxy's
// fixed ones (the health check's, the cache manager's).
func ValidateMetricsPort(p int) error {
	if err := ValidatePort(p); err != nil {
		return err
	}
	switch p {
	case DefaultHealthPort:
		return fmt.Errorf("port %d is reserved for the proxy's health check", p)
	case DefaultManagerPort:
		return fmt.Errorf("port %d is reserved for Squid's cache manager, which the Squid exporter reads", p)
	}
	return nil
}

// validateMetrics checks s.Metrics against the rest of s. Metrics count the JSON access log, so they need it:
// with the text line mtail would count nothing, and the dashboards would show a quiet proxy.
func (s Settings) validateMetrics() error {
	m := s.Metrics
	if m == nil {
		return nil
	}
	if s.LogFormat != LogFormatJSON {
		return errors.New(`metrics count the JSON access log: set log_format to "json"`)
	}
	metrics, squid := m.Ports()
	for _, p := range []int{metrics, squid} {
		if err := ValidateMetricsPort(p); err != nil {
			return fmt.Errorf("metrics port: %w", err)
		}
		if p == s.Port {
			return fmt.Errorf("metrics port %d is the proxy's own port", p)
		}
	}
	if s.Port == DefaultManagerPort {
		return fmt.Errorf("port %d is reserved for Squid's cache manager on a proxy with metrics", s.Port)
	}
	if metrics == squid {
		return fmt.Errorf("the metrics port and the Squid metrics port are both %d", metrics)
	}
	switch n := len(m.AllowedClientCIDRs); {
	case n == 0:
		return errors.New("metrics need at least one allowed client range: nobody could scrape them")
	case n > MaxAllowedClientCIDRs:
		return fmt.Errorf("at most %d metrics client CIDRs, got %d", MaxAllowedClientCIDRs, n)
	}
	for _, c := range m.AllowedClientCIDRs {
		if err := ValidateClientCIDR(c); err != nil {
			return fmt.Errorf("metrics client range: %w", err)
		}
	}
	return nil
}
