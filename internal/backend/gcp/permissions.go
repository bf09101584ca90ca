package gcp

import (
	"regexp"
	"slices"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// RoleFile is the custom role, in the repository and the docs, that grants the provider's account exactly
// what this backend needs; an error that names a missing permission points there.
const RoleFile = "examples/permissions/gcp/egress-proxy-role.yaml"

// methodPermissions maps every API method the backend calls to the IAM permissions it needs, as each method's
// reference page names them ("IAM Permissions"), with those an insert's body adds ("Create and start a Compute
// Engine instance", Required permissions) and setMetadata's on a VM with a service account ("Compute Engine
// IAM roles and permissions", the serviceAccountUser role). A test proves RoleFile lists exactly these, and the
// fakes refuse each call that lacks one, so a new call cannot go unlisted.
var methodPermissions = map[string][]string{
	"compute.instances.insert": {
		"compute.instances.create",
		"compute.disks.create",                // the boot disk
		"compute.images.useReadOnly",          // an image of the project (gcp.image)
		"compute.instances.setMetadata",       // the startup script and the config
		"compute.instances.setLabels",         // the managed labels
		"compute.instances.setTags",           // gcp.network_tags
		"compute.subnetworks.use",             // its network interface
		"compute.subnetworks.useExternalIp",   // the egress address
		"compute.addresses.use",               // a static one
		"compute.instances.setServiceAccount", // gcp.service_account
		"iam.serviceAccounts.actAs",
	},
	"compute.instances.get":                {"compute.instances.get"},
	"compute.instances.delete":             {"compute.instances.delete"},
	"compute.instances.aggregatedList":     {"compute.instances.list"},
	"compute.instances.setLabels":          {"compute.instances.setLabels"},
	"compute.instances.setMetadata":        {"compute.instances.setMetadata", "iam.serviceAccounts.actAs"},
	"compute.instances.getGuestAttributes": {"compute.instances.getGuestAttributes"},
	"compute.addresses.insert":             {"compute.addresses.create"},
	"compute.addresses.get":                {"compute.addresses.get"},
	"compute.addresses.delete":             {"compute.addresses.delete"},
	"compute.addresses.aggregatedList":     {"compute.addresses.list"},
	"compute.zoneOperations.get":           {"compute.zoneOperations.get"},
	"compute.regionOperations.get":         {"compute.regionOperations.get"},
	"compute.zones.get":                    {"compute.zones.get"},
	"compute.regions.get":                  {"compute.regions.get"},
	"secretmanager.secrets.create":         {"secretmanager.secrets.create"},
	"secretmanager.secrets.get":            {"secretmanager.secrets.get"},
	"secretmanager.secrets.delete":         {"secretmanager.secrets.delete"},
	"secretmanager.secrets.setIamPolicy":   {"secretmanager.secrets.setIamPolicy"},
	"secretmanager.secrets.addVersion":     {"secretmanager.versions.add"},
	"secretmanager.versions.access":        {"secretmanager.versions.access"},
}

// Permissions lists, sorted, every IAM permission the backend may need on a project: what RoleFile grants,
// and what the health check asks testIamPermissions about.
func Permissions() []string {
	var out []string
	for _, ps := range methodPermissions {
		out = append(out, ps...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Compute Engine names a missing permission "Required 'compute.instances.create' permission for
// 'projects/p/zones/z/instances/x'" (403 forbidden); Secret Manager "Permission 'secretmanager.secrets.create'
// denied for resource 'projects/p' (or it may not exist)." (403 PERMISSION_DENIED).
var missingPermissionRE = []*regexp.Regexp{
	regexp.MustCompile(`Required '([A-Za-z0-9_.]+)' permission for '([^']*)'`),
	regexp.MustCompile(`Permission '([A-Za-z0-9_.]+)' denied for resource '([^']*)'`),
}

// missingPermission names the permission and the resource a refusal says the caller lacks, or "".
func missingPermission(err error) (permission, resource string) {
	if err == nil {
		return "", ""
	}
	text := err.Error()
	for _, re := range missingPermissionRE {
		if m := re.FindStringSubmatch(text); m != nil {
			return m[1], m[2]
		}
	}
	return "", ""
}

// permissionAdvice makes a refusal for a missing permission Permanent (no retry grants it), and says which
// permission, on what, and where the role that grants everything the backend needs is.
func permissionAdvice(e *backend.Error) {
	perm, resource := missingPermission(e.Err)
	if perm == "" {
		return
	}
	e.Class = backend.ClassPermanent
	var b strings.Builder
	b.WriteString("The provider's account lacks the IAM permission " + perm + " on " + resource + ". ")
	switch {
	case perm == "iam.serviceAccounts.actAs":
		b.WriteString("A proxy VM with gcp.service_account runs as that account: grant roles/iam.serviceAccountUser on it, or ")
	case strings.HasPrefix(perm, "secretmanager."):
		b.WriteString("A proxy VM with gcp.service_account keeps its secrets in Secret Manager: grant roles/secretmanager.admin on the project, or ")
	default:
		b.WriteString("Grant ")
	}
	b.WriteString("the custom role " + RoleFile + ", which lists every permission the gcp backend uses " +
		"(gcloud iam roles create --project=PROJECT --file=" + RoleFile + "; when you made it from an earlier " +
		"version, gcloud iam roles update with the new file), then apply again.")
	e.Advice = b.String()
}
