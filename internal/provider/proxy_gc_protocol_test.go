package provider

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// The list resource and the action, driven over the plugin protocol against the in-memory backends. The same
// RPCs against the real libvirtd are in proxy_gc_kvm_test.go.

const gcProviderJSON = `{
  "owner": "team-a",
  "default_labels": {"env": "test"},
  "gcp": {},
  "kvm": {"hosts": {"hv1": {"uri": "test:///default"}, "hv2": {"uri": "test:///default"}}}
}`

// gcFixture is one owner's proxies on two kvm hosts and a gcp zone, plus another owner's, at known ages.
type gcFixture struct {
	mem    memoryBackends
	client *protocolClient
}

func newGCFixture(t *testing.T) gcFixture {
	t.Helper()
	mem := newMemoryBackends()
	create := func(kind backend.Kind, target, name, owner string, labels map[string]string, age time.Duration) {
		placement := backend.Placement{Backend: kind, Target: target}
		switch kind {
		case kvm.Kind:
			placement.Options = &kvm.Options{VCPUs: 1, MemoryMiB: 512, DiskGiB: 10, Network: "default", WaitForAddress: true, WaitForProxy: true}
		case gcp.Kind:
			placement.Scope = "zone-a"
			placement.Options = &gcp.Options{MachineType: "e2-micro"}
		}
		inst, err := mem[kind].Create(context.Background(), backend.Spec{
			Name: name, UID: "uid-" + name, Owner: owner, Labels: mergeLabels(map[string]string{"env": "test"}, labels),
			Placement: placement,
			Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"},
				AllowedDestinations: []string{".example.com"}, AllowedPorts: []int{443}},
		})
		if err != nil {
			t.Fatal(err)
		}
		inst.CreatedAt = time.Now().Add(-age).UTC().Truncate(time.Second)
		mem[kind].Put(inst)
	}
	create(kvm.Kind, "hv1", "kept", "team-a", nil, 5*time.Hour)
	create(kvm.Kind, "hv1", "old-orphan", "team-a", map[string]string{"team": "ci"}, 3*time.Hour+time.Minute)
	create(kvm.Kind, "hv1", "in-flight", "team-a", nil, time.Minute)
	create(kvm.Kind, "hv2", "far-orphan", "team-a", map[string]string{"team": "ci"}, 50*time.Hour)
	create(kvm.Kind, "hv1", "not-ours", "team-b", nil, 5*time.Hour)
	create(gcp.Kind, "proj", "gcp-orphan", "team-a", map[string]string{"team": "web"}, 2*time.Hour)
	return gcFixture{mem: mem, client: startProtocol(t, &egressProvider{version: "test", factories: mem.factories}, gcProviderJSON)}
}

func (f gcFixture) ids(kind backend.Kind) []string {
	var ids []string
	for _, inst := range f.mem[kind].Instances() {
		ids = append(ids, inst.ID.String())
	}
	slices.Sort(ids)
	return ids
}

func resultIDs(c *protocolClient, results []tfprotov6.ListResourceResult) []string {
	var ids []string
	for _, r := range results {
		if r.Identity != nil {
			ids = append(ids, c.identityID(r.Identity))
		}
	}
	return ids
}

func warnings(results []tfprotov6.ListResourceResult) []string {
	var out []string
	for _, r := range results {
		for _, d := range r.Diagnostics {
			out = append(out, severityName[d.Severity]+": "+d.Summary+": "+d.Detail)
		}
	}
	return out
}

var severityName = map[tfprotov6.DiagnosticSeverity]string{
	tfprotov6.DiagnosticSeverityError: "error", tfprotov6.DiagnosticSeverityWarning: "warning",
}

func TestProxyListResource_filters(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	tests := map[string]struct {
		config string
		limit  int64
		want   []string
	}{
		"every proxy of the owner": {`{}`, 0, []string{
			"gcp/proj/zone-a/gcp-orphan", "kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/old-orphan", "kvm/hv2/far-orphan"}},
		"orphans, known left out, in flight spared": {`{"orphaned_only": true, "known_ids": ["kvm/hv1/kept"]}`, 0, []string{
			"gcp/proj/zone-a/gcp-orphan", "kvm/hv1/old-orphan", "kvm/hv2/far-orphan"}},
		"orphans older than a day":    {`{"orphaned_only": true, "known_ids": ["kvm/hv1/kept"], "min_age": "24h"}`, 0, []string{"kvm/hv2/far-orphan"}},
		"one backend":                 {`{"backends": ["gcp"]}`, 0, []string{"gcp/proj/zone-a/gcp-orphan"}},
		"labels":                      {`{"labels": {"team": "ci"}}`, 0, []string{"kvm/hv1/old-orphan", "kvm/hv2/far-orphan"}},
		"default labels match too":    {`{"labels": {"env": "test", "team": "web"}}`, 0, []string{"gcp/proj/zone-a/gcp-orphan"}},
		"no proxy has the label":      {`{"labels": {"team": "nobody"}}`, 0, nil},
		"min_age without orphaned":    {`{"min_age": "4h"}`, 0, []string{"kvm/hv1/kept", "kvm/hv2/far-orphan"}},
		"limit ends the stream early": {`{}`, 2, []string{"gcp/proj/zone-a/gcp-orphan", "kvm/hv1/in-flight"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			results := f.client.list(tc.config, false, tc.limit)
			if w := warnings(results); len(w) > 0 {
				t.Errorf("unexpected diagnostics: %v", w)
			}
			if diff := cmp.Diff(tc.want, resultIDs(f.client, results)); diff != "" {
				t.Errorf("listed ids (-want +got):\n%s", diff)
			}
			for _, r := range results {
				if r.Resource != nil {
					t.Errorf("%s: a resource object was sent though include_resource was false", r.DisplayName)
				}
			}
		})
	}
}

func TestProxyListResource_displayNames(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	var got []string
	for _, r := range f.client.list(`{"orphaned_only": true, "known_ids": ["kvm/hv1/kept"]}`, false, 0) {
		got = append(got, r.DisplayName)
	}
	// User labels sorted by key, then the age in its largest whole unit.
	want := []string{
		"gcp/proj/zone-a/gcp-orphan (env=test, team=web, age 2h)",
		"kvm/hv1/old-orphan (env=test, team=ci, age 3h)",
		"kvm/hv2/far-orphan (env=test, team=ci, age 2d)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("display names (-want +got):\n%s", diff)
	}
}

// With include_resource every result carries the whole object, and it is exactly what the resource's Read
// and an import of the identity produce.
func TestProxyListResource_includeResourceRoundTripsThroughRead(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	// Listings without the proxies' settings, as the kubernetes backend's are: the objects must still be whole.
	for _, m := range f.mem {
		m.SetFaults(memory.Faults{ListWithoutSettings: true})
	}
	results := f.client.list(`{}`, true, 0)
	if len(results) != 5 {
		t.Fatalf("listed %d results, want 5: %v", len(results), warnings(results))
	}
	for _, r := range results {
		if len(r.Diagnostics) > 0 {
			t.Errorf("%s: %s", r.DisplayName, diagnosticsText(r.Diagnostics))
		}
		f.client.requireRoundTrip(r)
		obj := f.client.resourceValue(r.Resource)
		if id := stringAttr(t, obj, "id"); id != f.client.identityID(r.Identity) {
			t.Errorf("object id %s, identity %s", id, f.client.identityID(r.Identity))
		}
	}
	// The provider's default labels are not written into the object's labels: the generated resource block
	// would otherwise declare them twice and plan a change.
	old := results[3]
	if got := stringAttr(t, f.client.resourceValue(old.Resource), "uid"); got != "uid-old-orphan" {
		t.Fatalf("result 3 is %s, want old-orphan", got)
	}
	var attrs map[string]tftypes.Value
	if err := f.client.resourceValue(old.Resource).As(&attrs); err != nil {
		t.Fatal(err)
	}
	var labels map[string]tftypes.Value
	if err := attrs["labels"].As(&labels); err != nil {
		t.Fatal(err)
	}
	if len(labels) != 1 || !labels["team"].Equal(tftypes.NewValue(tftypes.String, "ci")) {
		t.Errorf("labels of old-orphan: want only team=ci, got %v", attrs["labels"])
	}
}

func TestProxyListResource_failingScopeIsReported(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	f.mem[kvm.Kind].SetFaults(memory.Faults{ListFailures: map[string]error{
		"hv2": memory.ClassError(backend.ClassTransient, "kvm host hv2", "connection refused"),
	}})
	results := f.client.list(`{"orphaned_only": true, "known_ids": ["kvm/hv1/kept"]}`, true, 0)
	if diff := cmp.Diff([]string{"gcp/proj/zone-a/gcp-orphan", "kvm/hv1/old-orphan"}, resultIDs(f.client, results)); diff != "" {
		t.Errorf("the reachable scopes' orphans (-want +got):\n%s", diff)
	}
	w := warnings(results)
	if len(w) != 1 || !regexp.MustCompile(`^warning: Orphan list is incomplete: 1 scope\(s\) could not be listed.*\n- kvm scope "hv2": transient: kvm host hv2: connection refused \(class Transient\)`).MatchString(w[0]) {
		t.Errorf("want one warning naming hv2 and its class, got %q", w)
	}
}

func TestProxyListResource_invalidConfig(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	tests := map[string]struct{ config, want string }{
		"known ids without orphaned_only":  {`{"known_ids": ["kvm/hv1/kept"]}`, "known_ids without orphaned_only"},
		"known ids with orphaned_only off": {`{"orphaned_only": false, "known_ids": ["kvm/hv1/kept"]}`, "known_ids without orphaned_only"},
		"bad min_age":                      {`{"min_age": "soon"}`, "Invalid duration"},
		"bad backend":                      {`{"backends": ["azure"]}`, "Invalid Attribute Value Match"},
		"bad known id":                     {`{"orphaned_only": true, "known_ids": ["vm-1"]}`, "Invalid id"},
		"bad label key":                    {`{"labels": {"Team!": "x"}}`, "Invalid label key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			diags := f.client.validateList(tc.config)
			if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityError || diags[0].Summary != tc.want {
				t.Errorf("want one error %q, got:\n%s", tc.want, diagnosticsText(diags))
			}
		})
	}
	if diags := f.client.validateList(`{"orphaned_only": true, "known_ids": ["kvm/hv1/kept"], "min_age": "1h"}`); len(diags) > 0 {
		t.Errorf("a valid configuration is refused:\n%s", diagnosticsText(diags))
	}
}

func TestProxyGCAction_dryRunByDefaultDeletesNothing(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	before := f.ids(kvm.Kind)
	progress, diags := f.client.invoke(`{"known_ids": ["kvm/hv1/kept"]}`)
	requireNoDiagnostics(t, "InvokeAction", diags)
	want := []string{
		"would delete gcp/proj/zone-a/gcp-orphan (env=test, team=web, age 2h)",
		"would delete kvm/hv1/old-orphan (env=test, team=ci, age 3h)",
		"would delete kvm/hv2/far-orphan (env=test, team=ci, age 2d)",
		"dry run: 3 orphan(s) found, 3 would be deleted, nothing was deleted (set dry_run = false to delete)",
	}
	if diff := cmp.Diff(want, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, f.ids(kvm.Kind)); diff != "" {
		t.Errorf("the dry run changed the kvm proxies (-want +got):\n%s", diff)
	}
	if n := f.mem[kvm.Kind].Calls("delete") + f.mem[gcp.Kind].Calls("delete"); n != 0 {
		t.Errorf("the dry run called Delete %d times", n)
	}
}

func TestProxyGCAction_deletesOrphansUpToMaxDeletions(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	progress, diags := f.client.invoke(`{"dry_run": false, "max_deletions": 2, "known_ids": ["kvm/hv1/kept"]}`)
	requireNoDiagnostics(t, "InvokeAction", diags)
	want := []string{
		"deleting 1/2: gcp/proj/zone-a/gcp-orphan (env=test, team=web, age 2h)",
		"deleted 1/2: gcp/proj/zone-a/gcp-orphan",
		"deleting 2/2: kvm/hv1/old-orphan (env=test, team=ci, age 3h)",
		"deleted 2/2: kvm/hv1/old-orphan",
		"left for a later run (max_deletions = 2): kvm/hv2/far-orphan (env=test, team=ci, age 2d)",
		"3 orphan(s) found, 2 deleted; 1 left for a later run by max_deletions = 2",
	}
	if diff := cmp.Diff(want, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	// Kept (known), in flight (young), the far orphan (over the bound) and the other owner's stay.
	if diff := cmp.Diff([]string{"kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/not-ours", "kvm/hv2/far-orphan"}, f.ids(kvm.Kind)); diff != "" {
		t.Errorf("kvm proxies left (-want +got):\n%s", diff)
	}
	if left := f.ids(gcp.Kind); len(left) != 0 {
		t.Errorf("gcp proxies left: %v", left)
	}
}

// A scope that cannot be listed is reported, and the orphans of the others are still collected.
func TestProxyGCAction_failingScopeStopsNothingElse(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	f.mem[kvm.Kind].SetFaults(memory.Faults{ListFailures: map[string]error{
		"hv2": memory.ClassError(backend.ClassTransient, "kvm host hv2", "connection refused"),
	}})
	progress, diags := f.client.invoke(`{"dry_run": false, "known_ids": ["kvm/hv1/kept"], "backends": ["kvm"]}`)
	if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityWarning || !strings.Contains(diags[0].Detail, `kvm scope "hv2"`) {
		t.Errorf("want one warning naming hv2, got:\n%s", diagnosticsText(diags))
	}
	want := []string{
		`scope not listed, its orphans are not collected this run: kvm scope "hv2": transient: kvm host hv2: connection refused (class Transient)`,
		"deleting 1/1: kvm/hv1/old-orphan (env=test, team=ci, age 3h)",
		"deleted 1/1: kvm/hv1/old-orphan",
		"1 orphan(s) found, 1 deleted; 1 scope(s) could not be listed",
	}
	if diff := cmp.Diff(want, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	f.mem[kvm.Kind].SetFaults(memory.Faults{})
	if diff := cmp.Diff([]string{"kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/not-ours", "kvm/hv2/far-orphan"}, f.ids(kvm.Kind)); diff != "" {
		t.Errorf("kvm proxies left (-want +got):\n%s", diff)
	}
}

// A proxy that cannot be deleted is an error at the end; every other orphan is still tried.
func TestProxyGCAction_failedDeleteStopsNothingElse(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	f.mem[kvm.Kind].SetFaults(memory.Faults{Errors: map[string]error{
		"delete": memory.ClassError(backend.ClassPermanent, "kvm volume", "permission denied"),
	}})
	progress, diags := f.client.invoke(`{"dry_run": false, "known_ids": ["kvm/hv1/kept"]}`)
	var errs []string
	for _, d := range diags {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			errs = append(errs, d.Detail)
		}
	}
	if len(errs) != 2 || !strings.Contains(errs[0], "kvm/hv1/old-orphan") || !strings.Contains(errs[1], "kvm/hv2/far-orphan") ||
		!strings.Contains(errs[0], "Error class: Permanent") {
		t.Errorf("want one error per kvm orphan with its class, got:\n%s", diagnosticsText(diags))
	}
	if last := progress[len(progress)-1]; last != "3 orphan(s) found, 1 deleted, 2 could not be deleted (kvm/hv1/old-orphan, kvm/hv2/far-orphan)" {
		t.Errorf("summary: %q", last)
	}
	if left := f.ids(gcp.Kind); len(left) != 0 {
		t.Errorf("the gcp orphan was not deleted after the kvm failures: %v", left)
	}
}

func TestProxyGCAction_invalidConfig(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	tests := map[string]struct{ config, want string }{
		"zero deletions": {`{"max_deletions": 0}`, "Invalid Attribute Value"},
		"bad min_age":    {`{"min_age": "-1h"}`, "Invalid duration"},
		"bad known id":   {`{"known_ids": ["vm-1"]}`, "Invalid id"},
		"bad backend":    {`{"backends": ["azure"]}`, "Invalid Attribute Value Match"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			diags := f.client.validateAction(tc.config)
			if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityError || diags[0].Summary != tc.want {
				t.Errorf("want one error %q, got:\n%s", tc.want, diagnosticsText(diags))
			}
		})
	}
}

// Ctrl-C during a run: the orphan being deleted may finish or fail, the ones after it are not tried, and the
// run says so once instead of failing each with the same cancellation.
func TestProxyGCAction_interruptLeavesTheRestUntried(t *testing.T) {
	t.Parallel()
	f := newGCFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, diags := f.client.invokeWith(ctx, `{"dry_run": false, "known_ids": ["kvm/hv1/kept"], "backends": ["kvm"]}`, func(msg string) {
		if strings.HasPrefix(msg, "deleting 1/2: ") {
			cancel() // the action waits for this message to be taken, so it sees the cancellation before orphan 2
		}
	})
	var interrupted bool
	for _, d := range diags {
		if d.Severity == tfprotov6.DiagnosticSeverityError && d.Summary == "Garbage collection interrupted" {
			interrupted = true
			if !strings.Contains(d.Detail, "the 1 orphan(s) left were not tried") {
				t.Errorf("interruption detail: %s", d.Detail)
			}
		}
	}
	if !interrupted {
		t.Errorf("no interruption error:\n%s", diagnosticsText(diags))
	}
	if n := f.mem[kvm.Kind].Calls("delete"); n > 1 {
		t.Errorf("Delete was called %d times after the cancellation, want at most the one in progress", n)
	}
	if !slices.Contains(f.ids(kvm.Kind), "kvm/hv2/far-orphan") {
		t.Errorf("the orphan after the cancellation was deleted: %v", f.ids(kvm.Kind))
	}
}
