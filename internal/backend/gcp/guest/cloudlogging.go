package guest

import _ "embed" // the shipper's source, written to the VM by the startup script

// CloudLoggingUnit is the systemd unit that runs the Cloud Logging shipper on a VM whose metadata names a
// log (MetadataCloudLogging).
const CloudLoggingUnit = "egress-proxy-cloud-logging.service"

// cloudLoggingShipper follows Squid's access log and writes its lines to Cloud Logging with the VM's own
// token (cloudlogging.py, which says how). Python's standard library, which Debian's and Ubuntu's cloud
// images have, rather than a new binary to get onto the VM; no packaged log shipper writes to Cloud Logging
// (Google's Ops Agent is not in Debian). The startup script installs python3-minimal where it is missing.
//
//go:embed cloudlogging.py
var cloudLoggingShipper string
