package aws

import (
	"errors"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// takesLogFormat reports whether an agent that reads configs in format f installs a squid.conf that logs as
// s asks. The agent checks each config against the guard its user-data carries (guest/guard.go), learnt from
// the renderer of the provider that launched it; agents older than guest.FormatClientCA were launched by
// providers whose renderer had no JSON logformat, so their guard refuses that line. Text is the line every
// agent knows.
func takesLogFormat(f guest.ConfigFormat, s proxyconf.Settings) bool {
	return s.LogFormat != proxyconf.LogFormatJSON || f >= guest.FormatClientCA
}

// oldGuestJSONLog is Reconfigure's refusal of log_format "json" for a proxy whose agent would refuse it.
func oldGuestJSONLog(obj string) error {
	return &backend.Error{Class: backend.ClassPermanent, Object: obj,
		Err: errors.New("its guest was launched by an earlier version of this provider, whose agent refuses a squid.conf that logs JSON"),
		Advice: "Replace the proxy (terraform apply -replace=<address>) to launch it with the current guest, or set log_format = \"text\". " +
			"Nothing was changed: the proxy keeps its rules."}
}

// takesMetrics reports whether an agent that reads configs in format f runs the metrics s asks for: agents
// older than guest.FormatMetrics run neither mtail nor the exporter, and refuse a config with metrics (its
// MAC covers the ports theirs leaves out, its squid.conf opens the cache manager their guard never learnt).
func takesMetrics(f guest.ConfigFormat, s proxyconf.Settings) bool {
	return s.Metrics == nil || f >= guest.FormatMetrics
}

// oldGuestMetrics is Reconfigure's refusal of metrics for a proxy whose agent does not run them.
func oldGuestMetrics(obj string) error {
	return &backend.Error{Class: backend.ClassPermanent, Object: obj,
		Err: errors.New("its guest was launched by an earlier version of this provider, whose agent does not run the metrics programs"),
		Advice: "Replace the proxy (terraform apply -replace=<address>) to launch it with the current guest, or leave metrics unset. " +
			"Nothing was changed: the proxy keeps its rules."}
}
