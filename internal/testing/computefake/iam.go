package computefake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// IAM, as Compute Engine enforces it on the caller (R29 to R31 in README.md): each method needs its one
// permission, and an insert needs more for what its body asks (a boot disk, metadata, labels, tags, a
// subnetwork with an external address, a static address, a service account). Resource Manager's
// testIamPermissions (R32) answers from the same grants. The caller's grants are a flat
// set of permissions held on the project, which is what a custom role bound at the project gives. With
// Options.Permissions nil the caller holds everything, as the project's owner does.

// need is one permission a request needs, on the resource the refusal names.
type need struct{ permission, resource string }

// SetPermissions replaces the permissions the caller holds on every project; nil grants everything.
func (s *Server) SetPermissions(permissions []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Permissions = slices.Clone(permissions)
}

// authorize refuses a Compute request the caller's permissions do not cover (R29, R30), naming the first
// permission missing. The caller holds s.mu.
func (s *Server) authorize(r *http.Request, body []byte) *apiError {
	if s.opts.Permissions == nil {
		return nil
	}
	for _, n := range s.required(r, body) {
		if !slices.Contains(s.opts.Permissions, n.permission) {
			return &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for '%s'", n.permission, n.resource)}
		}
	}
	return nil
}

// required lists what a request needs, the method's own permission first. The permission of each method is
// the one its reference page names under "IAM Permissions"; a route the fake does not serve needs nothing
// here and is answered 501 as before. The caller holds s.mu.
func (s *Server) required(r *http.Request, body []byte) []need {
	if !strings.HasPrefix(r.URL.Path, apiPrefix) {
		return nil
	}
	p := strings.Split(strings.TrimPrefix(r.URL.Path, apiPrefix), "/")
	project, m := p[0], r.Method
	res := "projects/" + strings.Join(p, "/")
	one := func(permission string) []need { return []need{{permission, res}} }
	switch {
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "instances":
		return []need{{"compute.instances.list", "projects/" + project}}
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "addresses":
		return []need{{"compute.addresses.list", "projects/" + project}}
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "forwardingRules":
		return []need{{"compute.forwardingRules.list", "projects/" + project}}
	case len(p) == 3 && p[1] == "zones":
		return one("compute.zones.get")
	case len(p) == 3 && p[1] == "regions":
		return one("compute.regions.get")
	case len(p) >= 5 && p[1] == "zones" && p[3] == "operations":
		return []need{{"compute.zoneOperations.get", "projects/" + strings.Join(p[:5], "/")}}
	case len(p) >= 5 && p[1] == "regions" && p[3] == "operations":
		return []need{{"compute.regionOperations.get", "projects/" + strings.Join(p[:5], "/")}}
	case len(p) == 4 && p[1] == "zones" && p[3] == "instances" && m == http.MethodPost:
		return s.insertNeeds(project, p[2], body)
	case len(p) == 4 && p[1] == "zones" && p[3] == "instances":
		return one("compute.instances.list")
	case len(p) == 5 && p[1] == "zones" && p[3] == "instances" && m == http.MethodDelete:
		return one("compute.instances.delete")
	case len(p) == 5 && p[1] == "zones" && p[3] == "instances":
		return one("compute.instances.get")
	case len(p) == 6 && p[1] == "zones" && p[3] == "instances":
		inst := "projects/" + strings.Join(p[:5], "/")
		switch p[5] {
		case "setLabels":
			return []need{{"compute.instances.setLabels", inst}}
		case "getGuestAttributes":
			return []need{{"compute.instances.getGuestAttributes", inst}}
		case "setMetadata":
			// R31: metadata of a VM that runs as a service account is what that account's workloads read,
			// so changing it is acting as the account.
			out := []need{{"compute.instances.setMetadata", inst}}
			if in := s.instances[key(project, p[2], p[4])]; in != nil {
				for _, sa := range in.GetServiceAccounts() {
					out = append(out, actAs(project, sa.GetEmail()))
				}
			}
			return out
		}
	case len(p) == 4 && p[1] == "regions" && p[3] == "addresses" && m == http.MethodPost:
		var a computepb.Address
		_ = protojson.Unmarshal(body, &a) // shapes were checked against the discovery document already
		return []need{{"compute.addresses.create", res + "/" + a.GetName()}}
	case len(p) == 5 && p[1] == "regions" && p[3] == "addresses" && m == http.MethodDelete:
		return one("compute.addresses.delete")
	case len(p) == 5 && p[1] == "regions" && p[3] == "addresses":
		return one("compute.addresses.get")
	}
	return s.lbNeeds(r, p, body)
}

// insertNeeds is R30: instances.insert needs compute.instances.create, and a permission for each thing its
// body sets, as "Create and start a Compute Engine instance" (Required permissions) lists them.
func (s *Server) insertNeeds(project, zone string, body []byte) []need {
	var in computepb.Instance
	_ = protojson.Unmarshal(body, &in) // shapes were checked against the discovery document already
	inst := fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, in.GetName())
	out := []need{{"compute.instances.create", inst}}
	for _, d := range in.GetDisks() {
		ip := d.GetInitializeParams()
		if ip == nil {
			continue
		}
		name := ip.GetDiskName()
		if name == "" {
			name = in.GetName()
		}
		out = append(out, need{"compute.disks.create", fmt.Sprintf("projects/%s/zones/%s/disks/%s", project, zone, name)})
		// A public image's project (debian-cloud) grants its images to every authenticated user; an image of
		// the caller's own project is used with the caller's grants.
		if img := imagePath(project, ip.GetSourceImage()); strings.HasPrefix(img, "projects/"+project+"/") {
			out = append(out, need{"compute.images.useReadOnly", img})
		}
	}
	if len(in.GetMetadata().GetItems()) > 0 {
		out = append(out, need{"compute.instances.setMetadata", inst})
	}
	if len(in.GetLabels()) > 0 {
		out = append(out, need{"compute.instances.setLabels", inst})
	}
	if len(in.GetTags().GetItems()) > 0 {
		out = append(out, need{"compute.instances.setTags", inst})
	}
	region := RegionOf(zone)
	for _, nic := range in.GetNetworkInterfaces() {
		// The fake knows no legacy networks: every network is a VPC network, and an auto-mode network has
		// a subnetwork of its own name in each region.
		sub := lastPart(nic.GetSubnetwork())
		if sub == "" {
			sub = lastPart(nic.GetNetwork())
		}
		if sub == "" {
			sub = "default"
		}
		subnet := fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", project, region, sub)
		out = append(out, need{"compute.subnetworks.use", subnet})
		if len(nic.GetAccessConfigs()) > 0 {
			out = append(out, need{"compute.subnetworks.useExternalIp", subnet})
		}
		for _, ac := range nic.GetAccessConfigs() {
			for k, a := range s.addresses {
				if ac.GetNatIP() != "" && a.GetAddress() == ac.GetNatIP() && strings.HasPrefix(k, project+"/") {
					out = append(out, need{"compute.addresses.use", fmt.Sprintf("projects/%s/regions/%s/addresses/%s", project, lastPart(a.GetRegion()), a.GetName())})
				}
			}
		}
	}
	for _, sa := range in.GetServiceAccounts() {
		out = append(out, need{"compute.instances.setServiceAccount", inst}, actAs(project, sa.GetEmail()))
	}
	return out
}

// actAs is what attaching or touching a VM of the service account email needs: iam.serviceAccounts.actAs on
// the account ("default" is the project's default compute account, R27).
func actAs(project, email string) need {
	if email == "default" {
		email = DefaultServiceAccountEmail(project)
	}
	return need{"iam.serviceAccounts.actAs", fmt.Sprintf("projects/%s/serviceAccounts/%s", project, email)}
}

// imagePath is a sourceImage as a path from "projects/": full URLs and project-relative paths alike.
func imagePath(project, image string) string {
	if i := strings.Index(image, "projects/"); i >= 0 {
		return image[i:]
	}
	if strings.HasPrefix(image, "global/") {
		return "projects/" + project + "/" + image
	}
	return image
}

func lastPart(link string) string {
	if i := strings.LastIndexByte(link, '/'); i >= 0 {
		return link[i+1:]
	}
	return link
}

// Cloud Resource Manager's projects.testIamPermissions (R32), v1 and v3, which a caller uses to learn which of
// the permissions it asks about it holds on the project. It needs no permission itself.
var testIamPermissionsRE = regexp.MustCompile(`^/v[13]/projects/([^/:]+):testIamPermissions$`)

// serveResourceManager answers testIamPermissions and reports whether the path was one; status is the answer's.
func (s *Server) serveResourceManager(w http.ResponseWriter, r *http.Request) (int, bool) {
	if !testIamPermissionsRE.MatchString(r.URL.Path) {
		return 0, false
	}
	rmError := func(code int, status, message string) (int, bool) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": message, "status": status}})
		return code, true
	}
	if r.Method != http.MethodPost {
		return rmError(http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "testIamPermissions is a POST")
	}
	var req struct {
		Permissions []string `json:"permissions"`
	}
	b, err := io.ReadAll(r.Body)
	if err == nil {
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		return rmError(http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. "+err.Error())
	}
	for _, p := range req.Permissions {
		if strings.Contains(p, "*") {
			return rmError(http.StatusBadRequest, "INVALID_ARGUMENT",
				fmt.Sprintf("Permissions (%s) with wildcards (such as '*' or 'storage.*') are not allowed for Test IAM Permissions.", p))
		}
	}
	s.mu.Lock()
	granted := s.opts.Permissions
	s.mu.Unlock()
	var held []string
	for _, p := range req.Permissions {
		if granted == nil || slices.Contains(granted, p) {
			held = append(held, p)
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	// The answer omits the field when none is held, as proto3 JSON omits an empty repeated field.
	out := map[string]any{}
	if len(held) > 0 {
		out["permissions"] = held
	}
	_ = json.NewEncoder(w).Encode(out)
	return http.StatusOK, true
}

// Role is a custom role's definition as `gcloud iam roles create --file` reads it.
type Role struct {
	Title               string   `yaml:"title"`
	Description         string   `yaml:"description"`
	Stage               string   `yaml:"stage"`
	IncludedPermissions []string `yaml:"includedPermissions"`
}

// RoleFile is the custom role the project documents for the gcp backend, relative to the repository's root.
const RoleFile = "examples/permissions/gcp/egress-proxy-role.yaml"

// DocumentedRole reads RoleFile from the repository this package is built in, so that tests run with exactly
// the permissions the documentation grants: a permission the backend needs and the file lacks fails them.
func DocumentedRole() (Role, error) {
	root, err := repositoryRoot()
	if err != nil {
		return Role{}, err
	}
	return ReadRole(filepath.Join(root, RoleFile))
}

// repositoryRoot is the repository this package is built in: three folders up from this file, or, in a build
// with -trimpath (whose file names are module paths, as make test's non-race builds are), the nearest folder
// at or above the working directory (a test's is its package's) that holds go.mod.
func repositoryRoot() (string, error) {
	if _, self, _, ok := runtime.Caller(0); ok && filepath.IsAbs(self) {
		return filepath.Join(filepath.Dir(self), "..", "..", ".."), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("computefake: cannot locate the repository: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("computefake: cannot locate the repository: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// ReadRole reads a custom role's YAML definition, refusing fields gcloud's file does not have and a
// permission listed twice.
func ReadRole(path string) (Role, error) {
	f, err := os.Open(path)
	if err != nil {
		return Role{}, err
	}
	defer func() { _ = f.Close() }()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var r Role
	if err := dec.Decode(&r); err != nil {
		return Role{}, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, p := range r.IncludedPermissions {
		if seen[p] {
			return Role{}, fmt.Errorf("%s: %s listed twice", path, p)
		}
		seen[p] = true
	}
	if r.Title == "" || r.Stage == "" || len(r.IncludedPermissions) == 0 {
		return Role{}, fmt.Errorf("%s: a role needs a title, a stage and includedPermissions", path)
	}
	return r, nil
}

// lbNeeds is R41: the load balancers' methods, each its one permission, and an insert the use of what it
// refers to (the backend service's health check and groups, the forwarding rule's backend service and
// subnetwork, addInstances the instances). The caller holds s.mu.
func (s *Server) lbNeeds(r *http.Request, p []string, body []byte) []need {
	if len(p) < 4 {
		return nil
	}
	project, kind, m := p[0], p[3], r.Method
	res := "projects/" + strings.Join(p, "/")
	verb := ""
	if len(p) > 5 {
		verb = p[5]
	}
	perm := map[string]string{"healthChecks": "compute.regionHealthChecks", "instanceGroups": "compute.instanceGroups",
		"backendServices": "compute.regionBackendServices", "forwardingRules": "compute.forwardingRules"}[kind]
	if perm == "" || (kind == "instanceGroups") != (p[1] == "zones") {
		return nil
	}
	ref := func(link string) string {
		if i := strings.Index(link, "projects/"); i >= 0 {
			return link[i:]
		}
		return "projects/" + project + "/" + link
	}
	switch {
	case len(p) == 4 && m == http.MethodPost:
		var named struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(body, &named) // shapes were checked against the discovery document already
		out := []need{{perm + ".create", res + "/" + named.Name}}
		switch kind {
		case "backendServices":
			var bs computepb.BackendService
			_ = protojson.Unmarshal(body, &bs)
			for _, hc := range bs.GetHealthChecks() {
				out = append(out, need{"compute.regionHealthChecks.useReadOnly", ref(hc)})
			}
			for _, be := range bs.GetBackends() {
				out = append(out, need{"compute.instanceGroups.use", ref(be.GetGroup())})
			}
		case "forwardingRules":
			var fr computepb.ForwardingRule
			_ = protojson.Unmarshal(body, &fr)
			if fr.GetBackendService() != "" {
				out = append(out, need{"compute.regionBackendServices.use", ref(fr.GetBackendService())})
			}
			sub := lastPart(fr.GetSubnetwork())
			if sub == "" {
				sub = networkOf(fr.GetNetwork())
			}
			out = append(out, need{"compute.subnetworks.use", fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", project, p[2], sub)})
			if len(fr.GetLabels()) > 0 {
				out = append(out, need{"compute.forwardingRules.setLabels", res + "/" + fr.GetName()})
			}
		}
		return out
	case len(p) == 4:
		return one(perm+".list", res)
	case len(p) == 5 && m == http.MethodDelete:
		return one(perm+".delete", res)
	case len(p) == 5 && m == http.MethodPatch && kind == "backendServices":
		// regionBackendServices.patch: update, and the use of each group the body names as a backend.
		var bs computepb.BackendService
		_ = protojson.Unmarshal(body, &bs)
		out := []need{{perm + ".update", res}}
		for _, be := range bs.GetBackends() {
			out = append(out, need{"compute.instanceGroups.use", ref(be.GetGroup())})
		}
		return out
	case len(p) == 5:
		return one(perm+".get", res)
	case verb == "addInstances":
		var req computepb.InstanceGroupsAddInstancesRequest
		_ = protojson.Unmarshal(body, &req)
		out := []need{{"compute.instanceGroups.update", res[:strings.LastIndexByte(res, '/')]}}
		for _, in := range req.GetInstances() {
			out = append(out, need{"compute.instances.use", ref(in.GetInstance())})
		}
		return out
	case verb == "removeInstances":
		return one("compute.instanceGroups.update", res[:strings.LastIndexByte(res, '/')])
	case verb == "listInstances":
		return one("compute.instanceGroups.list", res[:strings.LastIndexByte(res, '/')])
	case verb == "getHealth":
		return one("compute.regionBackendServices.get", res[:strings.LastIndexByte(res, '/')])
	case verb == "setLabels":
		return one("compute.forwardingRules.setLabels", res[:strings.LastIndexByte(res, '/')])
	}
	return nil
}

func one(permission, resource string) []need { return []need{{permission, resource}} }
