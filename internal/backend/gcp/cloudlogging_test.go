package gcp

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// Cloud logging writes as the VM's service account: refused without one, or with scopes that keep its token
// from writing logs.
func TestValidateCloudLogging(t *testing.T) {
	t.Parallel()
	const sa = "proxy@p.iam.gserviceaccount.com"
	for name, c := range map[string]struct {
		opts Options
		want string // "" for accepted, else words of the error
	}{
		"off without an account":       {opts: Options{}},
		"on with an account":           {opts: Options{CloudLogging: true, ServiceAccount: sa}},
		"on with cloud-platform":       {opts: Options{CloudLogging: true, ServiceAccount: sa, Scopes: DefaultScopes}},
		"on with logging.write":        {opts: Options{CloudLogging: true, ServiceAccount: sa, Scopes: LegacyDefaultScopes}},
		"on without an account":        {opts: Options{CloudLogging: true}, want: "has none: set service_account"},
		"on with scopes that lack it":  {opts: Options{CloudLogging: true, ServiceAccount: sa, Scopes: []string{"https://www.googleapis.com/auth/devstorage.read_only"}}, want: "logging.write"},
		"the error names the log role": {opts: Options{CloudLogging: true}, want: LogWriterRole},
	} {
		err := ValidateCloudLogging(c.opts)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// Create writes the log's name into metadata, Get reads the option back from it, and Update turns it off and
// on again in place (the VM is the same one), refusing it on a VM without a service account.
func TestCloudLoggingInPlace(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	spec := testSpec("uid-cl", "us-central1-a")
	spec.Placement.Options = &Options{ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com", CloudLogging: true}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	key := func() (string, bool) {
		return metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataCloudLogging)
	}
	if v, ok := key(); !ok || v != CloudLogID(spec.Name) {
		t.Fatalf("after Create: %s = %q, %v", gcpguest.MetadataCloudLogging, v, ok)
	}
	id := fake.Instance(testProject, "us-central1-a", spec.Name).GetId()
	for _, on := range []bool{false, true} {
		spec.Placement.Options = &Options{ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com", CloudLogging: on}
		got, err := b.Update(ctx, inst.ID, spec)
		if err != nil {
			t.Fatal(err)
		}
		if read, ok := got.Placement.Options.(*Options); !ok || read.CloudLogging != on {
			t.Errorf("Update to %v reads back %+v", on, got.Placement.Options)
		}
		if _, ok := key(); ok != on {
			t.Errorf("Update to %v: the metadata key is there: %v", on, ok)
		}
		if fake.Instance(testProject, "us-central1-a", spec.Name).GetId() != id {
			t.Error("Update replaced the VM")
		}
	}

	bare := testSpec("uid-cl-bare", "us-central1-a")
	bareInst, err := b.Create(ctx, bare)
	if err != nil {
		t.Fatal(err)
	}
	bare.Placement.Options = &Options{CloudLogging: true}
	if _, err := b.Update(ctx, bareInst.ID, bare); err == nil || !strings.Contains(err.Error(), "service_account") {
		t.Errorf("turning cloud logging on for a VM without a service account: %v, want refused", err)
	}
	if _, err := b.Create(ctx, testSpecWith("uid-cl-none", &Options{CloudLogging: true})); err == nil || !strings.Contains(err.Error(), "service_account") {
		t.Errorf("creating with cloud logging and no service account: %v, want refused", err)
	}
}

func testSpecWith(uid string, o *Options) (s backend.Spec) {
	s = testSpec(uid, "us-central1-a")
	s.Placement.Options = o
	return s
}
