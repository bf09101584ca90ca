package provider

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// kvmOrphans makes n proxies of a fresh owner on the test libvirtd, straight through the backend as a
// killed apply leaves them, and stops them: a stopped domain reports the same state and addresses from one
// read to the next, which the round-trip assertions need.
func kvmOrphans(t *testing.T, b backend.Backend, uri string, n int) (string, []backend.Instance) {
	t.Helper()
	owner := "acc-" + uuid.NewString()[:8]
	var made []backend.Instance
	t.Cleanup(func() {
		for _, inst := range made {
			_ = b.Delete(context.Background(), inst.ID)
		}
	})
	for i := range n {
		uid := uuid.NewString()
		inst, err := b.Create(context.Background(), backend.Spec{
			Name: backend.NameFromUID(uid), UID: uid, Owner: owner, Labels: map[string]string{"team": "ci", "n": fmt.Sprint(i)},
			Placement: backend.Placement{Backend: kvm.Kind, Target: "local",
				Options: &kvm.Options{VCPUs: 1, MemoryMiB: 256, DiskGiB: 4}},
			Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"198.18.0.0/24"}, AllowedPorts: []int{443}},
		})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, inst)
		virsh(t, uri, "destroy", inst.Name)
	}
	return owner, made
}

// kvmVolumes lists the test pool's volume names.
func kvmVolumes(t *testing.T, uri string) []string {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", uri, "vol-list", "egress-test").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh vol-list: %v\n%s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			names = append(names, fields[0])
		}
	}
	return names
}

// The list resource and the action over the plugin protocol against the real libvirtd, with a second host
// that cannot be reached: its failure is reported and the reachable host's orphans are listed and collected.
func TestAccProxyGC_kvmProtocol(t *testing.T) {
	uri := kvmAccPreCheck(t)
	b := kvmBackend(t, uri)
	owner, made := kvmOrphans(t, b, uri, 2)
	kept, orphan := made[0], made[1]
	if kept.ID.String() > orphan.ID.String() {
		kept, orphan = orphan, kept
	}
	c := startProtocol(t, New("test")(), fmt.Sprintf(`{
  "owner": %q,
  "kvm": {
    "hosts": {
      "local": {"uri": %q},
      "down": {"uri": "qemu+tcp://127.0.0.1:1/system", "insecure": true, "connect_timeout": "2s"}
    },
    "pool": "egress-test", "network": "egress-test", "base_volume": "egress-base.qcow2", "domain_type": "qemu"
  }
}`, owner, uri))
	downWarning := func(t *testing.T, diags []*tfprotov6.Diagnostic) {
		t.Helper()
		if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityWarning || !strings.Contains(diags[0].Detail, `kvm scope "down"`) {
			t.Errorf("want one warning naming the unreachable host, got:\n%s", diagnosticsText(diags))
		}
	}
	listWarnings := func(results []tfprotov6.ListResourceResult) []*tfprotov6.Diagnostic {
		var diags []*tfprotov6.Diagnostic
		for _, r := range results {
			diags = append(diags, r.Diagnostics...)
		}
		return diags
	}

	t.Run("list every proxy with objects that round-trip", func(t *testing.T) {
		results := c.list(`{"labels": {"team": "ci"}}`, true, 0)
		downWarning(t, listWarnings(results))
		if diff := cmp.Diff([]string{kept.ID.String(), orphan.ID.String()}, resultIDs(c, results)); diff != "" {
			t.Fatalf("listed (-want +got):\n%s", diff)
		}
		for _, r := range results {
			if r.Identity == nil {
				continue
			}
			c.requireRoundTrip(r)
			if want := r.DisplayName; !strings.HasPrefix(want, c.identityID(r.Identity)+" (n=") || !strings.Contains(want, "team=ci, age ") {
				t.Errorf("display name %q", want)
			}
		}
	})
	t.Run("list orphans only", func(t *testing.T) {
		results := c.list(fmt.Sprintf(`{"orphaned_only": true, "known_ids": [%q], "min_age": "0s"}`, kept.ID), false, 0)
		downWarning(t, listWarnings(results))
		if diff := cmp.Diff([]string{orphan.ID.String()}, resultIDs(c, results)); diff != "" {
			t.Errorf("listed (-want +got):\n%s", diff)
		}
	})

	action := fmt.Sprintf(`{"known_ids": [%q], "min_age": "0s"%%s}`, kept.ID)
	t.Run("dry run deletes nothing", func(t *testing.T) {
		progress, diags := c.invoke(fmt.Sprintf(action, ""))
		downWarning(t, diags)
		if !strings.HasPrefix(progress[len(progress)-1], "dry run: 1 orphan(s) found, 1 would be deleted, nothing was deleted") {
			t.Errorf("progress: %q", progress)
		}
		if _, err := b.Get(context.Background(), orphan.ID); err != nil {
			t.Errorf("the dry run removed the orphan: %v", err)
		}
		// The volumes the real run must remove are there now, so their absence later proves the delete.
		if vols := kvmVolumes(t, uri); !slices.Contains(vols, orphan.Name+"-root.qcow2") || !slices.Contains(vols, orphan.Name+"-seed.iso") {
			t.Errorf("the orphan's volumes are not in the pool: %v", vols)
		}
	})
	t.Run("the orphan is deleted with its volumes", func(t *testing.T) {
		progress, diags := c.invoke(fmt.Sprintf(action, `, "dry_run": false`))
		downWarning(t, diags)
		want := []*regexp.Regexp{
			regexp.MustCompile(`^scope not listed, its orphans are not collected this run: kvm scope "down": .* \(class \w+\)$`),
			regexp.MustCompile(`^deleting 1/1: ` + regexp.QuoteMeta(orphan.ID.String()) + ` \(n=\d, team=ci, age \d+[smhd]\)$`),
			regexp.MustCompile(`^deleted 1/1: ` + regexp.QuoteMeta(orphan.ID.String()) + `$`),
			regexp.MustCompile(`^1 orphan\(s\) found, 1 deleted; 1 scope\(s\) could not be listed$`),
		}
		if len(progress) != len(want) {
			t.Fatalf("progress: %q", progress)
		}
		for i, re := range want {
			if !re.MatchString(progress[i]) {
				t.Errorf("progress %d: %q does not match %s", i, progress[i], re)
			}
		}
		if _, err := b.Get(context.Background(), orphan.ID); !backend.IsNotFound(err) {
			t.Errorf("the orphan is still there: %v", err)
		}
		for _, vol := range kvmVolumes(t, uri) {
			if strings.HasPrefix(vol, orphan.Name) {
				t.Errorf("volume %s of the deleted orphan is left in the pool", vol)
			}
		}
		left, err := b.ListByTag(context.Background(), backend.Selector{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 1 || left[0].ID != kept.ID {
			t.Errorf("the owner's proxies after the run: %v, want only %s", left, kept.ID)
		}
	})
}
