package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	cloudresourcemanager "google.golang.org/api/cloudresourcemanager/v3"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

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
	// The load balancer of a proxy of several VMs (ha.go); an insert needs the use of what it names.
	"compute.regionHealthChecks.insert":       {"compute.regionHealthChecks.create"},
	"compute.regionHealthChecks.get":          {"compute.regionHealthChecks.get"},
	"compute.regionHealthChecks.delete":       {"compute.regionHealthChecks.delete"},
	"compute.instanceGroups.insert":           {"compute.instanceGroups.create"},
	"compute.instanceGroups.get":              {"compute.instanceGroups.get"},
	"compute.instanceGroups.delete":           {"compute.instanceGroups.delete"},
	"compute.instanceGroups.addInstances":     {"compute.instanceGroups.update", "compute.instances.use"},
	"compute.instanceGroups.removeInstances":  {"compute.instanceGroups.update"},
	"compute.regionBackendServices.insert":    {"compute.regionBackendServices.create", "compute.regionHealthChecks.useReadOnly", "compute.instanceGroups.use"},
	"compute.regionBackendServices.get":       {"compute.regionBackendServices.get"},
	"compute.regionBackendServices.delete":    {"compute.regionBackendServices.delete"},
	"compute.regionBackendServices.patch":     {"compute.regionBackendServices.update", "compute.instanceGroups.use"},
	"compute.regionBackendServices.getHealth": {"compute.regionBackendServices.get"},
	"compute.forwardingRules.insert":          {"compute.forwardingRules.create", "compute.regionBackendServices.use", "compute.subnetworks.use", "compute.forwardingRules.setLabels"},
	"compute.forwardingRules.get":             {"compute.forwardingRules.get"},
	"compute.forwardingRules.delete":          {"compute.forwardingRules.delete"},
	"compute.forwardingRules.aggregatedList":  {"compute.forwardingRules.list"},
	"compute.forwardingRules.setLabels":       {"compute.forwardingRules.setLabels"},
	"secretmanager.secrets.create":            {"secretmanager.secrets.create"},
	"secretmanager.secrets.get":               {"secretmanager.secrets.get"},
	"secretmanager.secrets.delete":            {"secretmanager.secrets.delete"},
	"secretmanager.secrets.list":              {"secretmanager.secrets.list"},
	"secretmanager.secrets.setIamPolicy":      {"secretmanager.secrets.setIamPolicy"},
	"secretmanager.secrets.addVersion":        {"secretmanager.versions.add"},
	"secretmanager.versions.access":           {"secretmanager.versions.access"},
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

// newResourceManager builds the Cloud Resource Manager client of a project. Its discovery-based client takes
// the endpoint as a base path, which must end with a slash.
func newResourceManager(ctx context.Context, auth []option.ClientOption, endpoint string) (*cloudresourcemanager.Service, error) {
	opts := append([]option.ClientOption(nil), auth...)
	if endpoint != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(endpoint, "/")+"/"))
	}
	return cloudresourcemanager.NewService(ctx, opts...)
}

// missingPermissions asks Cloud Resource Manager which of the backend's permissions the provider's account
// lacks on the project (projects.testIamPermissions, which needs no permission itself), sorted.
func (b *Backend) missingPermissions(ctx context.Context, p *project) ([]string, error) {
	want := Permissions()
	resp, err := p.resources.Projects.TestIamPermissions("projects/"+p.id,
		&cloudresourcemanager.TestIamPermissionsRequest{Permissions: want}).Context(ctx).Do()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(want, func(perm string) bool { return slices.Contains(resp.Permissions, perm) }), nil
}

// DetailMissingPermissions is the Details key of the permissions a project's health found missing, comma
// separated, as the kubernetes backend names its missing verbs.
const DetailMissingPermissions = "missing_permissions"

// permissionHealth is the health check's first step. It returns no reason when the account holds every
// permission the backend needs, or when the question could not be asked (Resource Manager's API off, say:
// noted in details, and the reads that follow tell the rest); Unauthorized when the credentials were refused;
// Degraded, naming what is missing and the role that grants it, otherwise.
func (b *Backend) permissionHealth(ctx context.Context, p *project, details map[string]string) (reason, message string) {
	missing, err := b.missingPermissions(ctx, p)
	var ge *googleapi.Error
	switch {
	case errors.As(err, &ge) && ge.Code == http.StatusUnauthorized:
		return backend.HealthUnauthorized, classify("gcp project "+p.id+" testIamPermissions", err).Error()
	case err != nil:
		details["permissions"] = "not checked: " + classify("gcp project "+p.id+" testIamPermissions", err).Error()
		return "", ""
	case len(missing) == 0:
		details["permissions"] = "all held"
		return "", ""
	}
	details[DetailMissingPermissions] = strings.Join(missing, ", ")
	return backend.HealthDegraded, fmt.Sprintf("the provider's account lacks %d IAM permission(s) the gcp backend needs in project %s: %s. "+
		"Grant the custom role %s (gcloud iam roles create --project=%s --file=%s), or add them to the role you granted.",
		len(missing), p.id, strings.Join(missing, ", "), RoleFile, p.id, RoleFile)
}
