package guest

import (
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// A kvm proxy with metrics runs what every proxy VM runs for them (internal/proxyconf/vmguest/metrics.go):
// the image ships both packages with their units disabled (scripts/image/configure-rootfs.sh), and the seed
// (cloudinit.go) or the guest agent (internal/backend/kvm/reconfigure_metrics.go) writes the files.
const (
	MtailUnit               = vmguest.MtailUnit
	SquidExporterUnit       = vmguest.SquidExporterUnit
	MtailProgramPath        = vmguest.MtailProgramPath
	MtailDropInPath         = vmguest.MtailDropInPath
	SquidExporterDropInPath = vmguest.SquidExporterDropInPath
	SquidExporterUser       = vmguest.SquidExporterUser
	MetricsIfMissing        = vmguest.MetricsIfMissing
)

// MetricsUnits are the two units, as systemctl takes them.
var MetricsUnits = vmguest.MetricsUnits

// SquidOptions is vmguest.MetricsSquidOptions.
func SquidOptions(s proxyconf.Settings, opts proxyconf.RenderOptions) proxyconf.RenderOptions {
	return vmguest.MetricsSquidOptions(s, opts)
}

// MetricsFiles is vmguest.MetricsFiles.
func MetricsFiles(s proxyconf.Settings, managerPort int) []vmguest.File {
	return vmguest.MetricsFiles(s, managerPort)
}
