package gcp

import (
	"fmt"
	"slices"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
)

// LogWriterRole is the predefined role the VM's service account needs for Options.CloudLogging: it holds
// logging.logEntries.create, the one permission entries.write checks.
const LogWriterRole = "roles/logging.logWriter"

// loggingWriteScope is the OAuth scope that lets a token write log entries; cloud-platform includes it.
const loggingWriteScope = "https://www.googleapis.com/auth/logging.write"

// CloudLogID is the Cloud Logging log (its LOG_ID) the proxy named name ships its access log to: one log per
// proxy, which a Logs Explorer query names. Instance names are lowercase letters, digits and hyphens, which a
// LOG_ID takes as they are (no URL encoding).
func CloudLogID(name string) string { return "egress-proxy-access." + name }

// ValidateCloudLogging refuses shipping the access log from a VM that could not write it: one without a
// service account has no identity to write with, and one whose scopes allow neither cloud-platform nor
// logging.write gets a token Cloud Logging refuses.
func ValidateCloudLogging(g Options) error {
	if !g.CloudLogging {
		return nil
	}
	if g.ServiceAccount == "" {
		return fmt.Errorf("cloud logging writes as the VM's service account, and this VM has none: set service_account to an account that holds %s on the project", LogWriterRole)
	}
	if len(g.Scopes) > 0 && !slices.Contains(g.Scopes, cloudPlatformScope) && !slices.Contains(g.Scopes, loggingWriteScope) {
		return fmt.Errorf("cloud logging needs the VM's token to carry the scope %s or %s; scopes %v have neither", cloudPlatformScope, loggingWriteScope, g.Scopes)
	}
	return nil
}

// cloudLoggingItems is the metadata item that turns the VM's shipper on: the log's LOG_ID; none when off.
func cloudLoggingItems(g *Options, name string) []*computepb.Items {
	if !g.CloudLogging {
		return nil
	}
	return []*computepb.Items{{Key: proto.String(gcpguest.MetadataCloudLogging), Value: proto.String(CloudLogID(name))}}
}

// withCloudLogging is existing with the shipper's key set as g asks (the other keys kept), and whether that
// changes anything.
func withCloudLogging(existing []*computepb.Items, g *Options, name string) ([]*computepb.Items, bool) {
	want := cloudLoggingItems(g, name)
	var out []*computepb.Items
	changed := false
	for _, it := range existing {
		if it.GetKey() != gcpguest.MetadataCloudLogging {
			out = append(out, it)
			continue
		}
		if len(want) == 0 || it.GetValue() != want[0].GetValue() {
			changed = true
			continue
		}
		out = append(out, it)
		want = nil
	}
	if len(want) > 0 {
		changed = true
		out = append(out, want...)
	}
	return out, changed
}
