package computefake

import (
	"net/http"
	"slices"
	"testing"
)

// One test per IAM rule of README.md (R29 to R32), as rules_test.go has for the others.
func TestIAMRules(t *testing.T) {
	t.Parallel()
	// all is what the fake's own harness needs to insert and read an instance and an address.
	all := []string{
		"compute.instances.create", "compute.instances.get", "compute.instances.list", "compute.instances.setMetadata",
		"compute.instances.setLabels", "compute.instances.setTags", "compute.instances.setServiceAccount",
		"compute.disks.create", "compute.images.useReadOnly", "compute.subnetworks.use", "compute.subnetworks.useExternalIp",
		"compute.addresses.create", "compute.addresses.get", "compute.addresses.use", "iam.serviceAccounts.actAs",
		"compute.zoneOperations.get", "compute.instances.delete", "compute.zones.get",
	}
	without := func(p string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(q string) bool { return q == p })
	}
	for name, run := range map[string]func(h *harness){
		"R29 one permission per method": func(h *harness) {
			h.vm("vm", nil)
			h.s.SetPermissions(without("compute.instances.get"))
			h.want("get", h.do(http.MethodGet, instancesPath+"/vm", "", ""), 403, "forbidden",
				"Required 'compute.instances.get' permission for 'projects/p/zones/us-central1-a/instances/vm'")
			h.s.SetPermissions(without("compute.instances.list"))
			h.want("aggregatedList", h.do(http.MethodGet, "/compute/v1/projects/p/aggregated/instances", "", ""), 403, "forbidden",
				"Required 'compute.instances.list' permission for 'projects/p'")
			h.s.SetPermissions(without("compute.zoneOperations.get"))
			h.want("operation", h.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a/operations/op-1", "", ""), 403, "forbidden",
				"Required 'compute.zoneOperations.get' permission for 'projects/p/zones/us-central1-a/operations/op-1'")
			h.s.SetPermissions(without("compute.instances.delete"))
			h.want("delete", h.do(http.MethodDelete, instancesPath+"/vm", "", ""), 403, "forbidden", "'compute.instances.delete'")
			h.s.SetPermissions(without("compute.zones.get"))
			h.want("zone", h.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a", "", ""), 403, "forbidden", "'compute.zones.get'")
			h.s.SetPermissions(all)
			h.want("get with it", h.do(http.MethodGet, instancesPath+"/vm", "", ""), 200, "", "")
			// The permission is checked before the resource is looked up: a caller without it learns nothing.
			h.s.SetPermissions(without("compute.instances.get"))
			h.want("get of a missing one", h.do(http.MethodGet, instancesPath+"/gone", "", ""), 403, "forbidden", "'compute.instances.get'")
		},
		"R30 what an insert sets": func(h *harness) {
			sa := func(in map[string]any) {
				in["serviceAccounts"] = []any{map[string]any{"email": "proxy@p.iam.gserviceaccount.com"}}
				in["tags"] = map[string]any{"items": []any{"egress"}}
				field(in, "disks", 0, "initializeParams")["sourceImage"] = "projects/p/global/images/mine"
			}
			for _, tc := range []struct{ permission, resource string }{
				{"compute.instances.create", "projects/p/zones/us-central1-a/instances/vm"},
				{"compute.disks.create", "projects/p/zones/us-central1-a/disks/vm"},
				{"compute.images.useReadOnly", "projects/p/global/images/mine"},
				{"compute.instances.setMetadata", "projects/p/zones/us-central1-a/instances/vm"},
				{"compute.instances.setLabels", "projects/p/zones/us-central1-a/instances/vm"},
				{"compute.instances.setTags", "projects/p/zones/us-central1-a/instances/vm"},
				{"compute.subnetworks.use", "projects/p/regions/us-central1/subnetworks/default"},
				{"compute.subnetworks.useExternalIp", "projects/p/regions/us-central1/subnetworks/default"},
				{"compute.instances.setServiceAccount", "projects/p/zones/us-central1-a/instances/vm"},
				{"iam.serviceAccounts.actAs", "projects/p/serviceAccounts/proxy@p.iam.gserviceaccount.com"},
			} {
				h.s.SetPermissions(without(tc.permission))
				h.want("insert without "+tc.permission, h.do(http.MethodPost, instancesPath, "", instanceBody("vm", sa)), 403, "forbidden",
					"Required '"+tc.permission+"' permission for '"+tc.resource+"'")
			}
			// A public image's project lets everyone use its images; an instance without an external address
			// needs no useExternalIp.
			h.s.SetPermissions(without("compute.images.useReadOnly"))
			h.want("public image", h.do(http.MethodPost, instancesPath, "", instanceBody("public", nil)), 200, "", "")
			h.s.SetPermissions(without("compute.subnetworks.useExternalIp"))
			h.want("no external address", h.do(http.MethodPost, instancesPath, "", instanceBody("internal", func(in map[string]any) {
				in["networkInterfaces"] = []any{map[string]any{"network": "global/networks/default"}}
			})), 200, "", "")
			// A static address of the project is used with compute.addresses.use.
			h.s.SetPermissions(all)
			h.want("reserve", h.do(http.MethodPost, "/compute/v1/projects/p/regions/us-central1/addresses", "", `{"name":"ip1"}`), 200, "", "")
			ip := h.s.Address("p", "us-central1", "ip1").GetAddress()
			static := func(in map[string]any) { field(in, "networkInterfaces", 0, "accessConfigs", 0)["natIP"] = ip }
			h.s.SetPermissions(without("compute.addresses.use"))
			h.want("static address", h.do(http.MethodPost, instancesPath, "", instanceBody("static", static)), 403, "forbidden",
				"Required 'compute.addresses.use' permission for 'projects/p/regions/us-central1/addresses/ip1'")
			h.s.SetPermissions(all)
			h.want("static address with it", h.do(http.MethodPost, instancesPath, "", instanceBody("static", static)), 200, "", "")
			h.s.SetPermissions(without("compute.addresses.create"))
			h.want("reserve without", h.do(http.MethodPost, "/compute/v1/projects/p/regions/us-central1/addresses", "", `{"name":"ip2"}`), 403, "forbidden",
				"Required 'compute.addresses.create' permission for 'projects/p/regions/us-central1/addresses/ip2'")
		},
		"R31 metadata of a VM with a service account": func(h *harness) {
			in := h.vm("sa", func(in map[string]any) {
				in["serviceAccounts"] = []any{map[string]any{"email": "default"}}
			})
			h.vm("plain", nil)
			body := `{"fingerprint":"` + in.GetMetadata().GetFingerprint() + `","items":[{"key":"k","value":"v"}]}`
			h.s.SetPermissions(without("iam.serviceAccounts.actAs"))
			h.want("setMetadata", h.do(http.MethodPost, instancesPath+"/sa/setMetadata", "", body), 403, "forbidden",
				"Required 'iam.serviceAccounts.actAs' permission for 'projects/p/serviceAccounts/"+DefaultServiceAccountEmail("p")+"'")
			plain := h.s.Instance("p", "us-central1-a", "plain")
			body = `{"fingerprint":"` + plain.GetMetadata().GetFingerprint() + `","items":[{"key":"k","value":"v"}]}`
			h.want("setMetadata of a VM without one", h.do(http.MethodPost, instancesPath+"/plain/setMetadata", "", body), 200, "", "")
		},
		"R32 testIamPermissions": func(h *harness) {
			h.s.SetPermissions([]string{"compute.instances.get", "secretmanager.secrets.create"})
			for _, v := range []string{"v1", "v3"} {
				path := "/" + v + "/projects/p:testIamPermissions"
				h.want(v+" held", h.do(http.MethodPost, path, "", `{"permissions":["compute.instances.get","compute.instances.create","secretmanager.secrets.create"]}`),
					200, "", `{"permissions":["compute.instances.get","secretmanager.secrets.create"]}`)
				h.want(v+" none held", h.do(http.MethodPost, path, "", `{"permissions":["compute.instances.create"]}`), 200, "", `{}`)
				h.want(v+" wildcard", h.do(http.MethodPost, path, "", `{"permissions":["compute.*"]}`), 400, "", `"status":"INVALID_ARGUMENT"`)
			}
			// It needs no permission of its own: a caller holding nothing may still ask.
			h.s.SetPermissions([]string{})
			h.want("holding nothing", h.do(http.MethodPost, "/v1/projects/p:testIamPermissions", "", `{"permissions":["compute.instances.get"]}`), 200, "", `{}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := New(Options{Permissions: all})
			defer s.Close()
			run(&harness{t: t, s: s})
		})
	}
}
