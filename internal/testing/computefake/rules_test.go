package computefake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
)

// One test per rule of README.md, each named by the rule's number there, against the fake's wire: the
// status, the reason and the words a client reads.

const instancesPath = "/compute/v1/projects/p/zones/us-central1-a/instances"

// harness talks to one fake over HTTP, as the client does.
type harness struct {
	t    *testing.T
	s    *Server
	vmMu sync.Mutex
}

type answer struct {
	status int
	body   string
}

func (a answer) reason() string {
	var e struct {
		Error struct {
			Errors []struct{ Reason string } `json:"errors"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(a.body), &e)
	if len(e.Error.Errors) == 0 {
		return ""
	}
	return e.Error.Errors[0].Reason
}

// do sends one request; flavor, when set, is the Metadata-Flavor header of a guest's request.
func (h *harness) do(method, path, flavor, body string) answer {
	h.t.Helper()
	req, err := http.NewRequest(method, h.s.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if flavor != "" {
		req.Header.Set("Metadata-Flavor", flavor)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

// want fails unless a has the status and, when given, the reason and the words.
func (h *harness) want(what string, a answer, status int, reason, words string) {
	h.t.Helper()
	if a.status != status || (reason != "" && a.reason() != reason) || !strings.Contains(a.body, words) {
		h.t.Errorf("%s: %d %s, want %d %q with %q", what, a.status, a.body, status, reason, words)
	}
}

// instanceBody is an insert body the fake accepts, with edit applied to its JSON form.
func instanceBody(name string, edit func(map[string]any)) string {
	in := map[string]any{
		"name":        name,
		"machineType": "zones/us-central1-a/machineTypes/e2-small",
		"disks": []any{map[string]any{"boot": true, "autoDelete": true,
			"initializeParams": map[string]any{"sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}},
		"networkInterfaces": []any{map[string]any{"accessConfigs": []any{map[string]any{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}}}},
		"labels":            map[string]any{"team": "net"},
		"metadata":          map[string]any{"items": []any{map[string]any{"key": "startup-script", "value": "#!/bin/sh"}}},
	}
	if edit != nil {
		edit(in)
	}
	b, _ := json.Marshal(in)
	return string(b)
}

func metadataItems(items ...[2]string) map[string]any {
	var list []any
	for _, it := range items {
		list = append(list, map[string]any{"key": it[0], "value": it[1]})
	}
	return map[string]any{"items": list}
}

// vm inserts an instance and returns it as the API answers a get (the operation completes at once).
func (h *harness) vm(name string, edit func(map[string]any)) *computepb.Instance {
	h.t.Helper()
	h.want("insert "+name, h.do(http.MethodPost, instancesPath, "", instanceBody(name, edit)), http.StatusOK, "", "")
	a := h.do(http.MethodGet, instancesPath+"/"+name, "", "")
	in := &computepb.Instance{}
	if err := protojson.Unmarshal([]byte(a.body), in); err != nil {
		h.t.Fatalf("get %s: %v %s", name, err, a.body)
	}
	return in
}

func (h *harness) guestPut(name, path, value string) answer {
	h.t.Helper()
	h.vmMu.Lock()
	defer h.vmMu.Unlock()
	h.s.MetadataInstance("p", "us-central1-a", name)
	return h.do(http.MethodPut, "/computeMetadata/v1/instance/guest-attributes/"+path, "Google", value)
}

func (h *harness) guestQuery(name, queryPath string) answer {
	return h.do(http.MethodGet, instancesPath+"/"+name+"/getGuestAttributes?queryPath="+queryPath, "", "")
}

func withMetadata(items ...[2]string) func(map[string]any) {
	return func(in map[string]any) { in["metadata"] = metadataItems(items...) }
}

func TestDocumentedRules(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", MaxMetadataValueBytes)
	for name, run := range map[string]func(h *harness){
		"R1 unknown body field": func(h *harness) {
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) { in["machineTyp"] = "e2-small" }))
			h.want("insert", a, 400, "invalid", `Unknown name \"machineTyp\" at 'resource': Cannot find field.`)
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) {
				field(in, "disks", 0, "initializeParams")["source_image"] = "x"
			}))
			h.want("proto field name", a, 400, "invalid", `at 'resource.disks[0].initializeParams'`)
		},
		"R2 wrong type": func(h *harness) {
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) { in["canIpForward"] = "yes" }))
			h.want("string for a boolean", a, 400, "invalid", "Invalid value at 'resource.canIpForward' (TYPE_BOOL)")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) { in["labels"] = []any{"team"} }))
			h.want("list for a map", a, 400, "invalid", "Invalid value at 'resource.labels' (TYPE_MESSAGE)")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) {
				field(in, "disks", 0)["diskSizeGb"] = "ten"
			}))
			h.want("text for an int64", a, 400, "invalid", "resource.disks[0].diskSizeGb")
		},
		"R3 enum values": func(h *harness) {
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) {
				in["scheduling"] = map[string]any{"provisioningModel": "CHEAP"}
			}))
			h.want("provisioningModel", a, 400, "invalid", "Invalid value for field 'resource.scheduling.provisioningModel': 'CHEAP'. Must be one of [")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) {
				field(in, "networkInterfaces", 0, "accessConfigs", 0)["type"] = "NAT"
			}))
			h.want("accessConfigs type", a, 400, "invalid", "resource.networkInterfaces[0].accessConfigs[0].type")
		},
		"R4 required fields": func(h *harness) {
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("", func(in map[string]any) { delete(in, "name") }))
			h.want("no name", a, 400, "required", "Required field 'resource.name' not specified")
			h.want("no body", h.do(http.MethodPost, instancesPath, "", ""), 400, "required", "Required field 'resource' not specified")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm", withMetadata([2]string{"k", ""})))
			h.want("metadata item with a value", a, 200, "", "")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm2", func(in map[string]any) {
				in["metadata"] = map[string]any{"items": []any{map[string]any{"key": "k"}}}
			}))
			h.want("metadata item without a value", a, 400, "required", "Required field 'resource.metadata.items[0].value' not specified")
		},
		"R5 path parameters": func(h *harness) {
			h.want("instance name", h.do(http.MethodGet, instancesPath+"/Bad_Name", "", ""), 400, "invalid",
				"Invalid value for field 'instance': 'Bad_Name'. Must be a match of regex")
			h.want("zone name", h.do(http.MethodGet, "/compute/v1/projects/p/zones/US/instances", "", ""), 400, "invalid", "Invalid value for field 'zone'")
		},
		"R6 query parameters": func(h *harness) {
			h.want("unknown", h.do(http.MethodGet, instancesPath+"?colour=red", "", ""), 400, "invalid", "Cannot bind query parameter. Field 'colour' could not be found")
			h.want("type", h.do(http.MethodGet, instancesPath+"?maxResults=many", "", ""), 400, "invalid", "Invalid value for field 'maxResults'")
			h.want("range", h.do(http.MethodGet, instancesPath+"?maxResults=501", "", ""), 400, "invalid", "maxResults")
			h.want("standard parameter", h.do(http.MethodGet, instancesPath+"?prettyPrint=false&maxResults=500", "", ""), 200, "", "")
		},
		"R7 routes": func(h *harness) {
			h.want("no such method", h.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a/gadgets", "", ""), 404, "notFound", "")
			h.want("a method the fake lacks", h.do(http.MethodGet, "/compute/v1/projects/p/global/networks", "", ""), 501, "notImplemented", "")
		},
		"R8 instance names": func(h *harness) {
			for _, bad := range []string{"1vm", "vm-", "VM", strings.Repeat("a", 64)} {
				h.want(bad, h.do(http.MethodPost, instancesPath, "", instanceBody(bad, nil)), 400, "invalid", "Invalid value for field 'resource.name'")
			}
			h.want("63 characters", h.do(http.MethodPost, instancesPath, "", instanceBody("a"+strings.Repeat("0", 62), nil)), 200, "", "")
		},
		"R9 metadata keys": func(h *harness) {
			for _, bad := range []string{"a.b", "a b", strings.Repeat("k", 129), ""} {
				a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", withMetadata([2]string{bad, "v"})))
				h.want(fmt.Sprintf("key %.10q", bad), a, 400, "invalid", "resource.metadata.items[0].key")
			}
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", withMetadata([2]string{"Key_9-" + strings.Repeat("k", 122), "v"})))
			h.want("128 bytes", a, 200, "", "")
		},
		"R10 metadata value size": func(h *harness) {
			h.want("256 KiB", h.do(http.MethodPost, instancesPath, "", instanceBody("vm", withMetadata([2]string{"a", big}))), 200, "", "")
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm2", withMetadata([2]string{"a", big + "x"})))
			h.want("one byte more", a, 400, "invalid", "resource.metadata.items[0].value")
		},
		"R11 metadata total size": func(h *harness) {
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", withMetadata([2]string{"a", big})))
			h.want("half", a, 200, "", "")
			a = h.do(http.MethodPost, instancesPath, "", instanceBody("vm2", withMetadata([2]string{"a", big}, [2]string{"b", big[1:]})))
			h.want("512 KB", a, 400, "invalid", "must be less than 524288 bytes")
			in := h.vm("vm3", nil)
			body := fmt.Sprintf(`{"fingerprint":%q,"items":[{"key":"a","value":%q},{"key":"b","value":%q}]}`, in.GetMetadata().GetFingerprint(), big, big)
			h.want("setMetadata", h.do(http.MethodPost, instancesPath+"/vm3/setMetadata", "", body), 400, "invalid", "must be less than")
		},
		"R12 setMetadata fingerprint": func(h *harness) {
			in := h.vm("vm", nil)
			items := `"items":[{"key":"a","value":"1"}]`
			h.want("none", h.do(http.MethodPost, instancesPath+"/vm/setMetadata", "", "{"+items+"}"), 412, "conditionNotMet", "fingerprint")
			h.want("current", h.do(http.MethodPost, instancesPath+"/vm/setMetadata", "", fmt.Sprintf(`{"fingerprint":%q,%s}`, in.GetMetadata().GetFingerprint(), items)), 200, "", "")
			h.want("stale", h.do(http.MethodPost, instancesPath+"/vm/setMetadata", "", fmt.Sprintf(`{"fingerprint":%q,%s}`, in.GetMetadata().GetFingerprint(), items)), 412, "conditionNotMet", "")
		},
		"R13 labels": func(h *harness) {
			for what, labels := range map[string]map[string]any{
				"key with a capital":  {"Team": "a"},
				"key starting digit":  {"1team": "a"},
				"empty key":           {"": "a"},
				"key of 64":           {strings.Repeat("k", 64): "a"},
				"value with a dot":    {"team": "a.b"},
				"value of 64":         {"team": strings.Repeat("v", 64)},
				"65 labels":           manyLabels(65),
				"upper case value":    {"team": "NET"},
				"value with a space":  {"team": "a b"},
				"key with a slash":    {"a/b": "c"},
				"key with a colon":    {"a:b": "c"},
				"value with an at":    {"owner": "a@b"},
				"value with a plus":   {"v": "1+2"},
				"key with an equal":   {"a=b": "c"},
				"value with a hash":   {"v": "#1"},
				"value with a tilde":  {"v": "~"},
				"value with a comma":  {"v": "a,b"},
				"value with a quote":  {"v": "a'b"},
				"key with a percent":  {"a%": "b"},
				"value with a star":   {"v": "*"},
				"value with a dollar": {"v": "$"},
			} {
				a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm", func(in map[string]any) { in["labels"] = labels }))
				h.want(what, a, 400, "invalid", "resource.labels")
			}
			for i, labels := range []map[string]any{
				manyLabels(64),
				{"team": ""},
				{"k" + strings.Repeat("0", 62): strings.Repeat("v", 63)},
				{"équipe": "réseau"},
				{"a-b_c": "-_0"},
			} {
				a := h.do(http.MethodPost, instancesPath, "", instanceBody(fmt.Sprint("vm-", i), func(in map[string]any) { in["labels"] = labels }))
				h.want(fmt.Sprint(labels), a, 200, "", "")
			}
			in := h.vm("vm-set", nil)
			body := fmt.Sprintf(`{"labelFingerprint":%q,"labels":{"Bad":"x"}}`, in.GetLabelFingerprint())
			h.want("setLabels", h.do(http.MethodPost, instancesPath+"/vm-set/setLabels", "", body), 400, "invalid", "resource.labels")
		},
		"R14 setLabels fingerprint": func(h *harness) {
			in := h.vm("vm", nil)
			set := func(fp string) answer {
				return h.do(http.MethodPost, instancesPath+"/vm/setLabels", "", fmt.Sprintf(`{"labelFingerprint":%q,"labels":{"team":"sec"}}`, fp))
			}
			h.want("current", set(in.GetLabelFingerprint()), 200, "", "")
			h.want("stale", set(in.GetLabelFingerprint()), 412, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed")
		},
		"R15 guest attributes off by default": func(h *harness) {
			h.vm("vm", nil)
			a := h.guestPut("vm", "egress/applied", "id")
			if a.status != http.StatusForbidden || strings.TrimSpace(a.body) != GuestAttributesDisabled {
				h.t.Errorf("guest write: %d %q, want 403 %q", a.status, a.body, GuestAttributesDisabled)
			}
			h.want("guest read", h.do(http.MethodGet, "/computeMetadata/v1/instance/guest-attributes/egress/applied", "Google", ""), 403, "", GuestAttributesDisabled)
			h.want("query", h.guestQuery("vm", "egress/"), 404, "notFound", "The resource 'egress/' of type 'Guest Attribute' was not found.")
			if got := h.s.RefusedGuestWrites(); len(got) != 1 || got[0] != "p/us-central1-a/vm egress/applied" {
				h.t.Errorf("refused writes %q", got)
			}
			if err := h.s.SetGuestAttribute("p", "us-central1-a", "vm", "egress/applied", "id"); err == nil || !strings.Contains(err.Error(), "403") {
				h.t.Errorf("SetGuestAttribute with guest attributes off = %v, want the 403", err)
			}
		},
		"R16 enabled on the instance or the project": func(h *harness) {
			for i, tc := range []struct {
				instance, project string
				on                bool
			}{
				{"TRUE", "", true}, {"true", "", true}, {"Y", "", true}, {"yes", "", true}, {"1", "", true},
				{"", "TRUE", true}, {"FALSE", "TRUE", false}, {"0", "TRUE", false}, {"no", "", false}, {"", "", false},
				{"", "FALSE", false}, {"enabled", "", false},
			} {
				name := fmt.Sprintf("vm-%d", i)
				var edit func(map[string]any)
				if tc.instance != "" {
					edit = withMetadata([2]string{EnableGuestAttributes, tc.instance})
				}
				h.vm(name, edit)
				h.s.SetProjectMetadata("p", EnableGuestAttributes, tc.project)
				a := h.guestPut(name, "egress/applied", "id-"+name)
				if got := a.status == http.StatusOK; got != tc.on {
					h.t.Errorf("instance %q, project %q: guest write %d %s, want enabled %v", tc.instance, tc.project, a.status, a.body, tc.on)
					continue
				}
				if tc.on && !strings.Contains(h.guestQuery(name, "egress/").body, "id-"+name) {
					h.t.Errorf("instance %q, project %q: the query does not return the write", tc.instance, tc.project)
				}
			}
		},
		"R17 guest attribute paths": func(h *harness) {
			h.vm("vm", withMetadata([2]string{EnableGuestAttributes, "TRUE"}))
			for _, bad := range []string{"applied", "egress/a/b", "egress/a.b", "egr ess/a", "/a"} {
				h.want(bad, h.guestPut("vm", bad, "x"), 400, "", "NAMESPACE/KEY")
			}
			h.want("ok", h.guestPut("vm", "egress_1/applied-2", "x"), 200, "", "")
		},
		"R18 getGuestAttributes not found": func(h *harness) {
			h.vm("vm", withMetadata([2]string{EnableGuestAttributes, "TRUE"}))
			h.want("namespace", h.guestQuery("vm", "egress/"), 404, "notFound", "The resource 'egress/' of type 'Guest Attribute' was not found.")
			h.want("put", h.guestPut("vm", "egress/applied", "x"), 200, "", "")
			h.want("found", h.guestQuery("vm", "egress/"), 200, "", `"key":"applied"`)
			h.want("other namespace", h.guestQuery("vm", "hostkeys/"), 404, "notFound", "'hostkeys/' of type 'Guest Attribute'")
		},
		"R19 guest attribute query rate": func(h *harness) {
			// Its own fake, on a clock the test moves.
			clock := &testClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			s := New(Options{Now: clock.Now})
			defer s.Close()
			r := &harness{t: h.t, s: s}
			r.vm("vm", withMetadata([2]string{EnableGuestAttributes, "TRUE"}))
			for i := range GuestQueriesPerSecond {
				r.want(fmt.Sprint("burst ", i), r.guestQuery("vm", "egress/"), 404, "", "")
			}
			r.want("one more in the same second", r.guestQuery("vm", "egress/"), 429, "rateLimitExceeded", "")
			clock.add(time.Second)
			for i := GuestQueriesPerSecond + 1; i < GuestQueriesPerMinute; i++ {
				clock.add(time.Second)
				r.want(fmt.Sprint("query ", i+1), r.guestQuery("vm", "egress/"), 404, "", "")
			}
			clock.add(time.Second)
			r.want("the eleventh in a minute", r.guestQuery("vm", "egress/"), 429, "rateLimitExceeded", "")
			clock.add(time.Minute)
			r.want("a minute later", r.guestQuery("vm", "egress/"), 404, "", "")
			if n := s.GuestQueryViolations(); n != 2 {
				h.t.Errorf("violations = %d, want 2", n)
			}
		},
		"R20 operations": func(h *harness) {
			s := New(Options{OperationLatency: time.Hour})
			defer s.Close()
			r := &harness{t: h.t, s: s}
			a := r.do(http.MethodPost, instancesPath, "", instanceBody("vm", nil))
			op := &computepb.Operation{}
			if err := protojson.Unmarshal([]byte(a.body), op); err != nil || op.GetStatus() != computepb.Operation_RUNNING || op.GetOperationType() != "insert" {
				h.t.Fatalf("insert answered %v %s, want a RUNNING insert operation", err, a.body)
			}
			if in := s.Instance("p", "us-central1-a", "vm"); in.GetStatus() != "PROVISIONING" {
				h.t.Errorf("instance during the insert: %s, want PROVISIONING", in.GetStatus())
			}
			r.want("operations.get", r.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a/operations/"+op.GetName(), "", ""), 200, "", `"status":"RUNNING"`)
			r.want("unknown operation", r.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a/operations/operation-1", "", ""), 404, "notFound", "was not found")

			q := New(Options{})
			defer q.Close()
			q.SetQuota("us-central1", "CPUS", 1)
			r = &harness{t: h.t, s: q}
			a = r.do(http.MethodPost, instancesPath, "", instanceBody("vm", nil))
			_ = protojson.Unmarshal([]byte(a.body), op)
			a = r.do(http.MethodGet, "/compute/v1/projects/p/zones/us-central1-a/operations/"+op.GetName(), "", "")
			r.want("failed operation", a, 200, "", `"httpErrorStatusCode":403`)
			r.want("its error", a, 200, "", `"code":"QUOTA_EXCEEDED"`)
			if q.Instance("p", "us-central1-a", "vm") != nil {
				h.t.Error("a refused insert left its instance")
			}
		},
		"R21 address states": func(h *harness) {
			const regional = "/compute/v1/projects/p/regions/us-central1/addresses"
			s := New(Options{OperationLatency: time.Hour})
			defer s.Close()
			r := &harness{t: h.t, s: s}
			r.want("reserve", r.do(http.MethodPost, regional, "", `{"name":"ip-1","addressType":"EXTERNAL"}`), 200, "", "")
			r.want("reserving", r.do(http.MethodGet, regional+"/ip-1", "", ""), 200, "", `"status":"RESERVING"`)
			s.SetOperationLatency(0)
			r.want("address type", r.do(http.MethodPost, regional, "", `{"name":"ip-2","addressType":"PUBLIC"}`), 400, "invalid", "resource.addressType")
			ip := h.s.ReserveAddress("p", "us-central1", "ip-3")
			h.want("reserved", h.do(http.MethodGet, regional+"/ip-3", "", ""), 200, "", `"status":"RESERVED"`)
			h.vm("vm", func(in map[string]any) {
				field(in, "networkInterfaces", 0, "accessConfigs", 0)["natIP"] = ip
			})
			h.want("in use", h.do(http.MethodGet, regional+"/ip-3", "", ""), 200, "", `"status":"IN_USE"`)
			h.want("delete in use", h.do(http.MethodDelete, regional+"/ip-3", "", ""), 400, "resourceInUseByAnotherResource", "is already being used by")
			a := h.do(http.MethodPost, instancesPath, "", instanceBody("vm-2", func(in map[string]any) {
				field(in, "networkInterfaces", 0, "accessConfigs", 0)["natIP"] = ip
			}))
			h.want("natIP in use", a, 400, "invalid", "natIP")
			h.want("delete the instance", h.do(http.MethodDelete, instancesPath+"/vm", "", ""), 200, "", "")
			h.want("released", h.do(http.MethodGet, regional+"/ip-3", "", ""), 200, "", `"status":"RESERVED"`)
		},
		"R22 aggregated lists": func(h *harness) {
			h.vm("vm", nil)
			h.s.BreakZone("europe-west1-b", "UNREACHABLE")
			a := h.do(http.MethodGet, "/compute/v1/projects/p/aggregated/instances?maxResults=500", "", "")
			list := &computepb.InstanceAggregatedList{}
			if err := protojson.Unmarshal([]byte(a.body), list); err != nil {
				h.t.Fatal(err, a.body)
			}
			for scope, want := range map[string]string{"zones/us-central1-b": "NO_RESULTS_ON_PAGE", "zones/europe-west1-b": "UNREACHABLE", "zones/us-central1-a": ""} {
				got, ok := list.GetItems()[scope]
				if !ok || got.GetWarning().GetCode() != want {
					h.t.Errorf("scope %s: %v, want warning %q", scope, got, want)
				}
			}
			if n := len(list.GetItems()["zones/us-central1-a"].GetInstances()); n != 1 {
				h.t.Errorf("zones/us-central1-a lists %d instances, want 1", n)
			}
		},
		"R23 authentication": func(h *harness) {
			s := New(Options{Token: "right"})
			defer s.Close()
			r := &harness{t: h.t, s: s}
			r.want("no token", r.do(http.MethodGet, instancesPath, "", ""), 401, "authError", "Request had invalid authentication credentials.")
		},
		"R24 metadata server flavor header": func(h *harness) {
			h.vm("vm", nil)
			h.s.MetadataInstance("p", "us-central1-a", "vm")
			h.want("without", h.do(http.MethodGet, "/computeMetadata/v1/instance/attributes/startup-script", "", ""), 403, "", "Metadata-Flavor")
			h.want("with", h.do(http.MethodGet, "/computeMetadata/v1/instance/attributes/startup-script", "Google", ""), 200, "", "#!/bin/sh")
		},
		"R25 organization policy vmExternalIpAccess": func(h *harness) {
			noExternal := func(in map[string]any) { field(in, "networkInterfaces", 0)["accessConfigs"] = []any{} }
			h.vm("before", nil)
			h.s.SetVMExternalIPAccess("p", []string{})
			h.want("deny all", h.do(http.MethodPost, instancesPath, "", instanceBody("vm", nil)), 412, "conditionNotMet",
				"Constraint constraints/compute.vmExternalIpAccess violated for project ")
			h.want("what to do", h.do(http.MethodPost, instancesPath, "", instanceBody("vm", nil)), 412, "conditionNotMet",
				"Add instance projects/p/zones/us-central1-a/instances/vm to the constraint to use external IP with it.")
			if h.s.Instance("p", "us-central1-a", "vm") != nil {
				h.t.Error("a refused insert left its instance")
			}
			h.vm("internal-only", noExternal)
			h.want("existing instances stay", h.do(http.MethodGet, instancesPath+"/before", "", ""), 200, "", `"natIP"`)
			h.s.SetVMExternalIPAccess("p", []string{"projects/p/zones/us-central1-a/instances/listed"})
			h.vm("listed", nil)
			h.want("not listed", h.do(http.MethodPost, instancesPath, "", instanceBody("other", nil)), 412, "conditionNotMet", "instances/other")
			h.s.SetVMExternalIPAccess("p", nil)
			h.vm("other", nil)
		},
		"R26 organization policy disableGuestAttributesAccess": func(h *harness) {
			h.vm("vm", withMetadata([2]string{EnableGuestAttributes, "TRUE"}))
			h.want("put before", h.guestPut("vm", "egress/applied", "x"), 200, "", "")
			h.s.DisableGuestAttributesAccess("p", true)
			h.want("query", h.guestQuery("vm", "egress/"), 412, "conditionNotMet",
				"Constraint constraints/compute.disableGuestAttributesAccess violated for project ")
			h.want("guest write", h.guestPut("vm", "egress/applied", "y"), 403, "", GuestAttributesDisabled)
			h.s.DisableGuestAttributesAccess("p", false)
			h.want("lifted", h.guestQuery("vm", "egress/"), 200, "", `"value":"x"`)
		},
		"R27 default service account": func(h *harness) {
			in := h.vm("vm", func(in map[string]any) {
				in["serviceAccounts"] = []any{map[string]any{"email": "default", "scopes": []any{"https://www.googleapis.com/auth/cloud-platform"}}}
			})
			if got := in.GetServiceAccounts(); len(got) != 1 || got[0].GetEmail() != DefaultServiceAccountEmail("p") ||
				!strings.HasSuffix(got[0].GetEmail(), "-compute@developer.gserviceaccount.com") {
				h.t.Errorf("service accounts read back: %v, want the default account by its email", got)
			}
		},
		"R28 service account token": func(h *harness) {
			s := New(Options{ServiceAccountToken: func(email string) string { return "token-of-" + email }})
			defer s.Close()
			r := &harness{t: h.t, s: s}
			r.vm("with", func(in map[string]any) {
				in["serviceAccounts"] = []any{map[string]any{"email": "proxy@p.iam.gserviceaccount.com", "scopes": []any{"https://www.googleapis.com/auth/cloud-platform"}}}
			})
			r.vm("without", nil)
			const path = "/computeMetadata/v1/instance/service-accounts/default/token"
			s.MetadataInstance("p", "us-central1-a", "with")
			r.want("with an account", r.do(http.MethodGet, path, "Google", ""), 200, "", `"access_token":"token-of-proxy@p.iam.gserviceaccount.com"`)
			r.want("its type", r.do(http.MethodGet, path, "Google", ""), 200, "", `"token_type":"Bearer"`)
			r.want("without the header", r.do(http.MethodGet, path, "", ""), 403, "", "Metadata-Flavor")
			s.MetadataInstance("p", "us-central1-a", "without")
			r.want("without an account", r.do(http.MethodGet, path, "Google", ""), 404, "", "")
		},
		"R33 instance id, zone and project": func(h *harness) {
			in := h.vm("vm", nil)
			h.s.MetadataInstance("p", "us-central1-a", "vm")
			h.want("id", h.do(http.MethodGet, "/computeMetadata/v1/instance/id", "Google", ""), 200, "", strconv.FormatUint(in.GetId(), 10))
			h.want("zone", h.do(http.MethodGet, "/computeMetadata/v1/instance/zone", "Google", ""), 200, "",
				fmt.Sprintf("projects/%d/zones/us-central1-a", projectNumber("p")))
			h.want("project", h.do(http.MethodGet, "/computeMetadata/v1/project/project-id", "Google", ""), 200, "", "p")
			h.want("without the header", h.do(http.MethodGet, "/computeMetadata/v1/instance/id", "", ""), 403, "", "Metadata-Flavor")
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

// field walks a decoded JSON body by keys and indexes to an object in it.
func field(v any, path ...any) map[string]any {
	for _, step := range path {
		switch k := step.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			v = l[k]
		}
	}
	m, _ := v.(map[string]any)
	return m
}

func manyLabels(n int) map[string]any {
	out := map[string]any{}
	for i := range n {
		out[fmt.Sprintf("k%d", i)] = "v"
	}
	return out
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
