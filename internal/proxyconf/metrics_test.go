package proxyconf

import (
	"strings"
	"testing"
)

// TestMetricsValidation: metrics need the JSON log, ports of their own and at least one client range of
// their own; a proxy without metrics is not held to any of it.
func TestMetricsValidation(t *testing.T) {
	withMetrics := func(format LogFormat, port int, m MetricsSettings) Settings {
		return Settings{Port: port, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"a.example"}, LogFormat: format, Metrics: &m}
	}
	scrapers := []string{"192.168.0.0/16"}
	tests := []struct {
		name    string
		s       Settings
		wantErr string // "" for valid
	}{
		{"no metrics, text log", Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}}, ""},
		{"defaults", withMetrics(LogFormatJSON, 3128, MetricsSettings{AllowedClientCIDRs: scrapers}), ""},
		{"own ports", withMetrics(LogFormatJSON, 3128, MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: scrapers}), ""},
		{"text log", withMetrics(LogFormatText, 3128, MetricsSettings{AllowedClientCIDRs: scrapers}), `log_format to "json"`},
		{"no client range", withMetrics(LogFormatJSON, 3128, MetricsSettings{}), "at least one allowed client range"},
		{"too many client ranges", withMetrics(LogFormatJSON, 3128, MetricsSettings{AllowedClientCIDRs: make([]string, MaxAllowedClientCIDRs+1)}), "at most 200 metrics client CIDRs"},
		{"a bad client range", withMetrics(LogFormatJSON, 3128, MetricsSettings{AllowedClientCIDRs: []string{"10.0.0.1/8"}}), "host bits set"},
		{"the proxy's port", withMetrics(LogFormatJSON, 3903, MetricsSettings{AllowedClientCIDRs: scrapers}), "the proxy's own port"},
		{"the health port", withMetrics(LogFormatJSON, 3128, MetricsSettings{Port: DefaultHealthPort, AllowedClientCIDRs: scrapers}), "health check"},
		{"the manager port", withMetrics(LogFormatJSON, 3128, MetricsSettings{SquidPort: DefaultManagerPort, AllowedClientCIDRs: scrapers}), "cache manager"},
		{"the proxy on the manager port", withMetrics(LogFormatJSON, DefaultManagerPort, MetricsSettings{AllowedClientCIDRs: scrapers}), "cache manager"},
		{"one port for both", withMetrics(LogFormatJSON, 3128, MetricsSettings{Port: 9100, SquidPort: 9100, AllowedClientCIDRs: scrapers}), "both 9100"},
		{"a port out of range", withMetrics(LogFormatJSON, 3128, MetricsSettings{Port: 70000, AllowedClientCIDRs: scrapers}), "between 1 and 65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestMetricsPortsDefaults: unset ports are the packages' own defaults.
func TestMetricsPortsDefaults(t *testing.T) {
	if m, s := (MetricsSettings{}).Ports(); m != DefaultMetricsPort || s != DefaultSquidMetricsPort {
		t.Errorf("Ports() = %d, %d, want %d, %d", m, s, DefaultMetricsPort, DefaultSquidMetricsPort)
	}
	if m, s := (MetricsSettings{Port: 1, SquidPort: 2}).Ports(); m != 1 || s != 2 {
		t.Errorf("Ports() = %d, %d, want 1, 2", m, s)
	}
}
