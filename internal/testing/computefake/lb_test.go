package computefake

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
)

// One test per load balancer rule of README.md (R34 to R41), as rules_test.go has for the others.

const (
	regionPath = "/compute/v1/projects/p/regions/us-central1"
	zoneAPath  = "/compute/v1/projects/p/zones/us-central1-a"
	hcBody     = `{"name":"hc","type":"HTTP","httpHealthCheck":{"port":3129,"requestPath":"/health"}}`
)

// lb builds, through the wire, a health check, a group of zone a holding vms, a backend service using both
// and, with rule, a forwarding rule to it.
func (h *harness) lb(rule bool, vms ...string) {
	h.t.Helper()
	h.want("health check", h.do(http.MethodPost, regionPath+"/healthChecks", "", hcBody), 200, "", "")
	h.want("group", h.do(http.MethodPost, zoneAPath+"/instanceGroups", "", `{"name":"ig"}`), 200, "", "")
	for _, vm := range vms {
		h.vm(vm, nil)
		h.want("add "+vm, h.do(http.MethodPost, zoneAPath+"/instanceGroups/ig/addInstances", "", fmt.Sprintf(`{"instances":[{"instance":"zones/us-central1-a/instances/%s"}]}`, vm)), 200, "", "")
	}
	h.want("backend service", h.do(http.MethodPost, regionPath+"/backendServices", "", serviceBody("bs")), 200, "", "")
	if rule {
		h.want("forwarding rule", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("fr", "")), 200, "", "")
	}
}

func serviceBody(name string) string {
	return fmt.Sprintf(`{"name":%q,"loadBalancingScheme":"INTERNAL","protocol":"TCP","healthChecks":["regions/us-central1/healthChecks/hc"],"backends":[{"group":"zones/us-central1-a/instanceGroups/ig"}]}`, name)
}

func ruleBody(name, extra string) string {
	if extra == "" {
		extra = `,"ports":["3128"]`
	}
	return fmt.Sprintf(`{"name":%q,"loadBalancingScheme":"INTERNAL","backendService":"regions/us-central1/backendServices/bs","labels":{"egress-owner":"o"}%s}`, name, extra)
}

func TestLoadBalancerRules(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(h *harness){
		"R34 health checks": func(h *harness) {
			h.want("TCP", h.do(http.MethodPost, regionPath+"/healthChecks", "", `{"name":"tcp","type":"TCP","tcpHealthCheck":{"port":3129}}`), 200, "", "")
			h.want("HTTP", h.do(http.MethodPost, regionPath+"/healthChecks", "", hcBody), 200, "", "")
			h.want("again", h.do(http.MethodPost, regionPath+"/healthChecks", "", hcBody), 409, "alreadyExists", "healthChecks/hc")
			h.want("HTTPS", h.do(http.MethodPost, regionPath+"/healthChecks", "", `{"name":"s","type":"HTTPS","httpsHealthCheck":{"port":1}}`), 400, "invalid", "resource.type")
			h.want("port 0", h.do(http.MethodPost, regionPath+"/healthChecks", "", `{"name":"z","type":"TCP","tcpHealthCheck":{"port":0}}`), 400, "invalid", "port")
			h.want("mixed", h.do(http.MethodPost, regionPath+"/healthChecks", "", `{"name":"m","type":"TCP","tcpHealthCheck":{"port":1},"httpHealthCheck":{"port":1}}`), 400, "invalid", "httpHealthCheck")
			h.want("bad name", h.do(http.MethodPost, regionPath+"/healthChecks", "", `{"name":"Bad","type":"TCP","tcpHealthCheck":{"port":1}}`), 400, "invalid", "resource.name")
			if hc := h.s.HealthCheck("p", "us-central1", "hc"); hc.GetHttpHealthCheck().GetPort() != 3129 {
				h.t.Errorf("stored health check: %v", hc)
			}
			h.want("get", h.do(http.MethodGet, regionPath+"/healthChecks/hc", "", ""), 200, "", `"port":3129`)
			h.want("delete", h.do(http.MethodDelete, regionPath+"/healthChecks/tcp", "", ""), 200, "", "")
			h.want("gone", h.do(http.MethodGet, regionPath+"/healthChecks/tcp", "", ""), 404, "notFound", "healthChecks/tcp")
		},
		"R35 instance groups": func(h *harness) {
			h.vm("vm", nil)
			h.want("group", h.do(http.MethodPost, zoneAPath+"/instanceGroups", "", `{"name":"ig"}`), 200, "", "")
			add := func(group, instance string) answer {
				return h.do(http.MethodPost, "/compute/v1/projects/p/zones/"+group+"/addInstances", "", fmt.Sprintf(`{"instances":[{"instance":%q}]}`, instance))
			}
			h.want("add", add("us-central1-a/instanceGroups/ig", h.s.URL+instancesPath[len("/compute/v1/"):]+"/vm"), 200, "", "")
			h.want("twice", add("us-central1-a/instanceGroups/ig", "zones/us-central1-a/instances/vm"), 400, "memberAlreadyExists", "")
			h.want("missing", add("us-central1-a/instanceGroups/ig", "zones/us-central1-a/instances/nope"), 400, "invalid", "not found")
			h.want("group of b", h.do(http.MethodPost, "/compute/v1/projects/p/zones/us-central1-b/instanceGroups", "", `{"name":"igb"}`), 200, "", "")
			h.want("other zone", add("us-central1-b/instanceGroups/igb", "zones/us-central1-a/instances/vm"), 400, "invalid", "must be in zone 'us-central1-b'")
			h.want("other network", h.do(http.MethodPost, zoneAPath+"/instanceGroups", "", `{"name":"ign","network":"global/networks/other"}`), 200, "", "")
			h.want("instance of default", add("us-central1-a/instanceGroups/ign", "zones/us-central1-a/instances/vm"), 400, "invalid", "network 'other'")
			if g, members := h.s.InstanceGroup("p", "us-central1-a", "ig"); lastPart(g.GetNetwork()) != "default" || len(members) != 1 {
				h.t.Errorf("group after the add: %v %v", g, members)
			}
			h.want("listInstances", h.do(http.MethodPost, zoneAPath+"/instanceGroups/ig/listInstances", "", `{"instanceState":"ALL"}`), 200, "", `"status":"RUNNING"`)
			h.want("get", h.do(http.MethodGet, zoneAPath+"/instanceGroups/ig", "", ""), 200, "", `"size":1`)
			h.want("remove", h.do(http.MethodPost, zoneAPath+"/instanceGroups/ig/removeInstances", "", `{"instances":[{"instance":"zones/us-central1-a/instances/vm"}]}`), 200, "", "")
			h.want("remove again", h.do(http.MethodPost, zoneAPath+"/instanceGroups/ig/removeInstances", "", `{"instances":[{"instance":"zones/us-central1-a/instances/vm"}]}`), 400, "memberNotFound", "")
			// One load-balanced group per instance: vm joins ig, ig is load balanced, then a second
			// load-balanced group cannot take it (nor a backend service a group that holds it).
			h.want("add back", add("us-central1-a/instanceGroups/ig", "zones/us-central1-a/instances/vm"), 200, "", "")
			h.want("health check", h.do(http.MethodPost, regionPath+"/healthChecks", "", hcBody), 200, "", "")
			h.want("service", h.do(http.MethodPost, regionPath+"/backendServices", "", serviceBody("bs")), 200, "", "")
			h.want("group 2", h.do(http.MethodPost, zoneAPath+"/instanceGroups", "", `{"name":"ig2"}`), 200, "", "")
			h.want("into an unbalanced group", add("us-central1-a/instanceGroups/ig2", "zones/us-central1-a/instances/vm"), 200, "", "")
			a := h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("bs2"), "instanceGroups/ig\"", "instanceGroups/ig2\"", 1))
			h.want("second load-balanced group", a, 400, "invalid", "already a member of load-balanced instance group")
			// A deleted instance leaves its groups.
			h.want("delete vm", h.do(http.MethodDelete, instancesPath+"/vm", "", ""), 200, "", "")
			if _, members := h.s.InstanceGroup("p", "us-central1-a", "ig"); len(members) != 0 {
				h.t.Errorf("group after its instance's deletion: %v", members)
			}
		},
		"R36 backend services": func(h *harness) {
			h.want("health check", h.do(http.MethodPost, regionPath+"/healthChecks", "", hcBody), 200, "", "")
			h.want("group", h.do(http.MethodPost, zoneAPath+"/instanceGroups", "", `{"name":"ig"}`), 200, "", "")
			h.want("EXTERNAL", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), `"INTERNAL"`, `"EXTERNAL"`, 1)), 400, "invalid", "loadBalancingScheme")
			h.want("UDP", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), `"TCP"`, `"UDP"`, 1)), 400, "invalid", "protocol")
			h.want("no health check", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), `"regions/us-central1/healthChecks/hc"`, ``, 1)), 400, "invalid", "exactly one health check")
			h.want("unknown health check", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), `healthChecks/hc"`, `healthChecks/nope"`, 1)), 400, "invalid", "was not found")
			h.want("group of another region", h.do(http.MethodPost, "/compute/v1/projects/p/zones/europe-west1-b/instanceGroups", "", `{"name":"ige"}`), 200, "", "")
			h.want("foreign group", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), "zones/us-central1-a/instanceGroups/ig", "zones/europe-west1-b/instanceGroups/ige", 1)), 400, "invalid", "region 'us-central1'")
			h.want("UTILIZATION", h.do(http.MethodPost, regionPath+"/backendServices", "", strings.Replace(serviceBody("x"), `ig"}`, `ig","balancingMode":"UTILIZATION"}`, 1)), 400, "invalid", "CONNECTION")
			h.want("good", h.do(http.MethodPost, regionPath+"/backendServices", "", serviceBody("bs")), 200, "", "")
			if bs := h.s.BackendService("p", "us-central1", "bs"); bs.GetBackends()[0].GetBalancingMode() != "CONNECTION" {
				h.t.Errorf("stored backend service: %v", bs)
			}
			h.want("health check in use", h.do(http.MethodDelete, regionPath+"/healthChecks/hc", "", ""), 400, "resourceInUseByAnotherResource", "backendServices/bs")
			h.want("group in use", h.do(http.MethodDelete, zoneAPath+"/instanceGroups/ig", "", ""), 400, "resourceInUseByAnotherResource", "backendServices/bs")
			h.want("delete the service", h.do(http.MethodDelete, regionPath+"/backendServices/bs", "", ""), 200, "", "")
			h.want("then the health check", h.do(http.MethodDelete, regionPath+"/healthChecks/hc", "", ""), 200, "", "")
			h.want("and the group", h.do(http.MethodDelete, zoneAPath+"/instanceGroups/ig", "", ""), 200, "", "")
		},
		"R36 backend service patch": func(h *harness) {
			h.lb(false, "vm")
			h.want("group b", h.do(http.MethodPost, "/compute/v1/projects/p/zones/us-central1-b/instanceGroups", "", `{"name":"ig"}`), 200, "", "")
			fp := h.s.BackendService("p", "us-central1", "bs").GetFingerprint()
			both := func(fp string) string {
				return fmt.Sprintf(`{"fingerprint":%q,"backends":[{"group":"zones/us-central1-a/instanceGroups/ig"},{"group":"zones/us-central1-b/instanceGroups/ig"}]}`, fp)
			}
			h.want("no fingerprint", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", both("")), 412, "conditionNotMet", "fingerprint")
			h.want("stale fingerprint", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", both("c3RhbGU=")), 412, "conditionNotMet", "fingerprint")
			h.want("another field", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", fmt.Sprintf(`{"fingerprint":%q,"protocol":"UDP"}`, fp)), 400, "invalid", "backends alone")
			h.want("unknown group", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", strings.Replace(both(fp), "us-central1-b/instanceGroups/ig", "us-central1-b/instanceGroups/nope", 1)), 400, "invalid", "was not found")
			h.want("twice", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", strings.Replace(both(fp), "us-central1-b", "us-central1-a", 1)), 400, "invalid", "Duplicate")
			h.want("missing service", h.do(http.MethodPatch, regionPath+"/backendServices/nope", "", both(fp)), 404, "notFound", "backendServices/nope")
			h.want("good", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", both(fp)), 200, "", "")
			bs := h.s.BackendService("p", "us-central1", "bs")
			if len(bs.GetBackends()) != 2 || bs.GetFingerprint() == fp || bs.GetBackends()[1].GetBalancingMode() != "CONNECTION" {
				h.t.Errorf("patched backend service: %v (fingerprint before %s)", bs, fp)
			}
			h.want("the old fingerprint again", h.do(http.MethodPatch, regionPath+"/backendServices/bs", "", both(fp)), 412, "conditionNotMet", "fingerprint")
			h.want("group b in use", h.do(http.MethodDelete, "/compute/v1/projects/p/zones/us-central1-b/instanceGroups/ig", "", ""), 400, "resourceInUseByAnotherResource", "backendServices/bs")
		},
		"R37 backend service in use": func(h *harness) {
			h.lb(true, "vm")
			h.want("service in use", h.do(http.MethodDelete, regionPath+"/backendServices/bs", "", ""), 400, "resourceInUseByAnotherResource", "forwardingRules/fr")
			h.want("rule", h.do(http.MethodDelete, regionPath+"/forwardingRules/fr", "", ""), 200, "", "")
			h.want("service", h.do(http.MethodDelete, regionPath+"/backendServices/bs", "", ""), 200, "", "")
			if left := h.s.LoadBalancerObjects(); len(left) != 2 {
				h.t.Errorf("left: %v, want the health check and the group", left)
			}
		},
		"R38 getHealth": func(h *harness) {
			h.lb(false, "vm", "vm2")
			health := func() *computepb.BackendServiceGroupHealth {
				a := h.do(http.MethodPost, regionPath+"/backendServices/bs/getHealth", "", `{"group":"zones/us-central1-a/instanceGroups/ig"}`)
				out := &computepb.BackendServiceGroupHealth{}
				if err := protojson.Unmarshal([]byte(a.body), out); err != nil || a.status != 200 {
					h.t.Fatalf("getHealth: %d %s %v", a.status, a.body, err)
				}
				return out
			}
			states := func() string {
				var s []string
				for _, st := range health().GetHealthStatus() {
					s = append(s, lastPart(st.GetInstance())+"="+st.GetHealthState())
				}
				return strings.Join(s, " ")
			}
			if got := states(); got != "vm=HEALTHY vm2=HEALTHY" {
				h.t.Errorf("both running: %s", got)
			}
			h.s.SetHealthy("p", "us-central1-a", "vm2", false)
			if got := states(); got != "vm=HEALTHY vm2=UNHEALTHY" {
				h.t.Errorf("vm2 marked unhealthy: %s", got)
			}
			h.s.SetHealthy("p", "us-central1-a", "vm2", true)
			h.s.SetInstanceStatus("p", "us-central1-a", "vm", "TERMINATED")
			if got := states(); got != "vm=UNHEALTHY vm2=HEALTHY" {
				h.t.Errorf("vm stopped: %s", got)
			}
			h.want("group not a backend", h.do(http.MethodPost, regionPath+"/backendServices/bs/getHealth", "", `{"group":"zones/us-central1-a/instanceGroups/other"}`), 400, "invalid", "Not a backend")
		},
		"R39 forwarding rules": func(h *harness) {
			h.lb(false, "vm")
			h.want("EXTERNAL", h.do(http.MethodPost, regionPath+"/forwardingRules", "", strings.Replace(ruleBody("x", ""), `"INTERNAL"`, `"EXTERNAL"`, 1)), 400, "invalid", "loadBalancingScheme")
			h.want("no service", h.do(http.MethodPost, regionPath+"/forwardingRules", "", strings.Replace(ruleBody("x", ""), "backendServices/bs", "backendServices/nope", 1)), 400, "invalid", "needs a backend service")
			h.want("six ports", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":["1","2","3","4","5","6"]`)), 400, "invalid", "At most 5 ports")
			h.want("five ports", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("five", `,"ports":["1","2","3","4","5"]`)), 200, "", "")
			h.want("no port", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":[]`)), 400, "invalid", "needs ports")
			h.want("both", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":["1"],"allPorts":true`)), 400, "invalid", "allPorts excludes")
			h.want("all ports", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("all", `,"allPorts":true`)), 200, "", "")
			h.want("UDP", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":["1"],"IPProtocol":"UDP"`)), 400, "invalid", "IPProtocol")
			h.want("outside the subnetwork", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":["1"],"IPAddress":"192.168.0.9"`)), 400, "invalid", "internal address of the subnetwork")
			vmIP := h.s.Instance("p", "us-central1-a", "vm").GetNetworkInterfaces()[0].GetNetworkIP()
			h.want("an instance's address", h.do(http.MethodPost, regionPath+"/forwardingRules", "", ruleBody("x", `,"ports":["1"],"IPAddress":"`+vmIP+`"`)), 400, "invalid", "already in use")
			h.want("bad label", h.do(http.MethodPost, regionPath+"/forwardingRules", "", strings.Replace(ruleBody("x", ""), `"egress-owner"`, `"Owner"`, 1)), 400, "invalid", "resource.labels")
			fr := h.s.ForwardingRule("p", "us-central1", "five")
			if ip := fr.GetIPAddress(); !strings.HasPrefix(ip, "10.") || ip == vmIP || fr.GetIPProtocol() != "TCP" {
				h.t.Errorf("allocated rule: %v", fr)
			}
			if other := h.s.ForwardingRule("p", "us-central1", "all"); other.GetIPAddress() == fr.GetIPAddress() {
				h.t.Errorf("two rules share %s", fr.GetIPAddress())
			}
			h.want("list by label", h.do(http.MethodGet, regionPath+"/forwardingRules?filter="+strings.ReplaceAll(`labels.egress-owner = "o"`, " ", "%20"), "", ""), 200, "", `"name":"all"`)
			h.want("aggregated", h.do(http.MethodGet, "/compute/v1/projects/p/aggregated/forwardingRules?filter="+strings.ReplaceAll(`labels.egress-owner = "o"`, " ", "%20"), "", ""), 200, "", `"regions/us-central1":{"forwardingRules":[`)
			h.want("list by another label", h.do(http.MethodGet, regionPath+"/forwardingRules?filter="+strings.ReplaceAll(`labels.egress-owner = "x"`, " ", "%20"), "", ""), 200, "", `{"kind":"compute#forwardingRuleList"}`)
		},
		"R40 forwarding rule labels": func(h *harness) {
			h.lb(true, "vm")
			fp := h.s.ForwardingRule("p", "us-central1", "fr").GetLabelFingerprint()
			h.want("stale", h.do(http.MethodPost, regionPath+"/forwardingRules/fr/setLabels", "", `{"labelFingerprint":"AAAAAAAAAAA=","labels":{"a":"b"}}`), 412, "conditionNotMet", "Labels fingerprint")
			h.want("bad", h.do(http.MethodPost, regionPath+"/forwardingRules/fr/setLabels", "", fmt.Sprintf(`{"labelFingerprint":%q,"labels":{"A":"b"}}`, fp)), 400, "invalid", "resource.labels")
			h.want("current", h.do(http.MethodPost, regionPath+"/forwardingRules/fr/setLabels", "", fmt.Sprintf(`{"labelFingerprint":%q,"labels":{"a":"b"}}`, fp)), 200, "", "")
			if fr := h.s.ForwardingRule("p", "us-central1", "fr"); fr.GetLabels()["a"] != "b" || fr.GetLabelFingerprint() == fp {
				h.t.Errorf("after setLabels: %v", fr)
			}
		},
		"R41 permissions": func(h *harness) {
			h.lb(true, "vm")
			all := []string{"compute.regionHealthChecks.create", "compute.regionHealthChecks.get", "compute.regionHealthChecks.delete",
				"compute.regionHealthChecks.useReadOnly", "compute.instanceGroups.create", "compute.instanceGroups.get",
				"compute.instanceGroups.delete", "compute.instanceGroups.update", "compute.instanceGroups.list", "compute.instanceGroups.use",
				"compute.instances.use", "compute.regionBackendServices.create", "compute.regionBackendServices.get",
				"compute.regionBackendServices.delete", "compute.regionBackendServices.use", "compute.regionBackendServices.update", "compute.forwardingRules.create",
				"compute.forwardingRules.get", "compute.forwardingRules.delete", "compute.forwardingRules.list",
				"compute.forwardingRules.setLabels", "compute.subnetworks.use", "compute.regionOperations.get", "compute.zoneOperations.get"}
			for _, c := range []struct {
				missing, method, path, body, names string
			}{
				{"compute.regionHealthChecks.get", http.MethodGet, regionPath + "/healthChecks/hc", "", "projects/p/regions/us-central1/healthChecks/hc"},
				{"compute.regionHealthChecks.create", http.MethodPost, regionPath + "/healthChecks", strings.Replace(hcBody, `"hc"`, `"hc2"`, 1), "healthChecks/hc2"},
				{"compute.instanceGroups.update", http.MethodPost, zoneAPath + "/instanceGroups/ig/removeInstances", `{"instances":[{"instance":"zones/us-central1-a/instances/vm"}]}`, "instanceGroups/ig'"},
				{"compute.instances.use", http.MethodPost, zoneAPath + "/instanceGroups/ig/addInstances", `{"instances":[{"instance":"zones/us-central1-a/instances/vm"}]}`, "instances/vm'"},
				{"compute.instanceGroups.list", http.MethodPost, zoneAPath + "/instanceGroups/ig/listInstances", `{}`, "instanceGroups/ig'"},
				{"compute.regionHealthChecks.useReadOnly", http.MethodPost, regionPath + "/backendServices", serviceBody("bs2"), "healthChecks/hc'"},
				{"compute.instanceGroups.use", http.MethodPost, regionPath + "/backendServices", serviceBody("bs2"), "instanceGroups/ig'"},
				{"compute.regionBackendServices.get", http.MethodPost, regionPath + "/backendServices/bs/getHealth", `{"group":"zones/us-central1-a/instanceGroups/ig"}`, "backendServices/bs'"},
				{"compute.regionBackendServices.use", http.MethodPost, regionPath + "/forwardingRules", ruleBody("fr2", ""), "backendServices/bs'"},
				{"compute.regionBackendServices.update", http.MethodPatch, regionPath + "/backendServices/bs", `{"backends":[]}`, "backendServices/bs'"},
				{"compute.instanceGroups.use", http.MethodPatch, regionPath + "/backendServices/bs", `{"backends":[{"group":"zones/us-central1-a/instanceGroups/ig"}]}`, "instanceGroups/ig'"},
				{"compute.forwardingRules.setLabels", http.MethodPost, regionPath + "/forwardingRules", ruleBody("fr2", ""), "forwardingRules/fr2'"},
				{"compute.forwardingRules.list", http.MethodGet, regionPath + "/forwardingRules", "", "projects/p/regions/us-central1/forwardingRules'"},
				{"compute.forwardingRules.delete", http.MethodDelete, regionPath + "/forwardingRules/fr", "", "forwardingRules/fr'"},
			} {
				var perms []string
				for _, p := range all {
					if p != c.missing {
						perms = append(perms, p)
					}
				}
				h.s.SetPermissions(perms)
				h.want("without "+c.missing, h.do(c.method, c.path, "", c.body), 403, "forbidden", "Required '"+c.missing+"' permission for '")
				if a := h.do(c.method, c.path, "", c.body); !strings.Contains(a.body, c.names) {
					h.t.Errorf("without %s: %s, want it to name %s", c.missing, a.body, c.names)
				}
			}
			h.s.SetPermissions(all)
			h.want("with all", h.do(http.MethodGet, regionPath+"/forwardingRules", "", ""), 200, "", "")
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := New(Options{})
			defer s.Close()
			run(&harness{t: t, s: s})
		})
	}
}
