package gcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// A create that meets a 404 has not lost its proxy, which it is making: what the proxy was to go in is
// missing. The Compute fake answers as Compute Engine does: an insert into a zone it does not have is a 404
// naming the zone, an address reserved in a region it does not have a 404 naming the region. Both come back
// Permanent (no retry brings them), about the missing resource, with the setting to correct; nothing is left.
func TestCreateNamesTheMissingParent(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		staticIP               bool
		wantObject, wantAdvice string
	}{
		"zone":                       {false, "gcp zone mars-north1-a in project " + testProject, "gcp.zone"},
		"region of a static address": {true, "gcp region mars-north1 in project " + testProject, "gcp.zone"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, computefake.Options{})
			spec := testSpec("uid-missing", "mars-north1-a")
			optionsOf(spec.Placement).StaticEgressIP = tc.staticIP
			inst, err := b.Create(ctxT(t), spec)
			if backend.ClassOf(err) != backend.ClassPermanent {
				t.Fatalf("Create = %v, want Permanent, not %s", err, backend.ClassOf(err))
			}
			var be *backend.Error
			if !errors.As(err, &be) || be.Object != tc.wantObject {
				t.Fatalf("Create = %v, want it about %s", err, tc.wantObject)
			}
			if !strings.Contains(err.Error(), "does not exist") || !strings.Contains(backend.AdviceOf(err), tc.wantAdvice) {
				t.Errorf("error %q with advice %q: want it to say what does not exist and to set %s", err, backend.AdviceOf(err), tc.wantAdvice)
			}
			if inst.ID != (backend.ProviderID{}) || len(fake.Instances()) != 0 {
				t.Error("a refused create left an instance")
			}
		})
	}
}

// Each resource a 404 names is told apart, from Compute Engine's own wording; a 404 for anything else keeps
// its text; other classes pass unchanged.
func TestMissingOnCreate(t *testing.T) {
	t.Parallel()
	const obj = "gcp instance egress-1 in project p, zone europe-west1-b"
	notFound := func(resource string) error {
		return classify(obj, wrappedMessage(404, "notFound", "The resource '"+resource+"' was not found"))
	}
	tests := map[string]struct {
		err                    error
		wantClass              backend.Class
		wantObject, wantAdvice string
	}{
		"network":      {notFound("projects/p/global/networks/vpc-1"), backend.ClassPermanent, "gcp network vpc-1 in project p", "gcp.network"},
		"subnetwork":   {notFound("projects/p/regions/europe-west1/subnetworks/sub-1"), backend.ClassPermanent, "gcp subnetwork sub-1 in project p", "gcp.subnetwork"},
		"image family": {notFound("projects/debian-cloud/global/images/family/debian-99"), backend.ClassPermanent, "gcp image family/debian-99 in project p", "gcp.image"},
		"machine type": {notFound("projects/p/zones/europe-west1-b/machineTypes/e9-huge"), backend.ClassPermanent, "gcp machine type e9-huge in project p", "gcp.machine_type"},
		"zone":         {notFound("projects/p/zones/europe-west9-z"), backend.ClassPermanent, "gcp zone europe-west9-z in project p", "gcp.zone"},
		"unknown kind": {notFound("projects/p/global/sslPolicies/x"), backend.ClassPermanent, obj, "projects/p/global/sslPolicies/x"},
		"no name":      {classify(obj, wrapped(404, "notFound")), backend.ClassPermanent, obj, "placement"},
		"quota stays":  {backend.Quota(obj, "CPUS"), backend.ClassQuota, obj, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := missingOnCreate("p", tc.err)
			var be *backend.Error
			if backend.ClassOf(err) != tc.wantClass || !errors.As(err, &be) || be.Object != tc.wantObject {
				t.Fatalf("missingOnCreate = %v, want %s about %s", err, tc.wantClass, tc.wantObject)
			}
			if !strings.Contains(backend.AdviceOf(err), tc.wantAdvice) {
				t.Errorf("advice %q does not say %q", backend.AdviceOf(err), tc.wantAdvice)
			}
			if tc.wantClass == backend.ClassPermanent && strings.Count(err.Error(), "notfound:") != 0 {
				t.Errorf("error %q still reads as NotFound", err)
			}
		})
	}
}

func TestValidateZoneRegionServiceAccount(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		check   func(string) error
		value   string
		wantErr string
	}{
		"zone":                       {ValidateZone, "europe-west1-b", ""},
		"zone of a long region":      {ValidateZone, "northamerica-northeast1-a", ""},
		"zone of a sovereign region": {ValidateZone, "u-france-east1-a", ""},
		"zone is a region":           {ValidateZone, "europe-west1", "is a region"},
		"zone uppercase":             {ValidateZone, "europe-west1-B", "not a Compute Engine zone"},
		"zone without a region":      {ValidateZone, "west1-b", "not a Compute Engine zone"},
		"zone empty":                 {ValidateZone, "", "not a Compute Engine zone"},
		"region":                     {ValidateRegion, "me-central2", ""},
		"region is a zone":           {ValidateRegion, "europe-west1-b", "its region is europe-west1"},
		"region with a space":        {ValidateRegion, "europe west1", "not a Compute Engine region"},
		"service account":            {ValidateServiceAccount, "proxy@p-1.iam.gserviceaccount.com", ""},
		"default compute account":    {ValidateServiceAccount, "123-compute@developer.gserviceaccount.com", ""},
		"default alias":              {ValidateServiceAccount, "default", ""},
		"account id only":            {ValidateServiceAccount, "proxy-sa", "must be an email"},
		"account with a space":       {ValidateServiceAccount, "proxy sa@p.iam.gserviceaccount.com", "must be an email"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.check(tc.value)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// wrappedMessage is wrapped with Compute Engine's message, which names the resource.
func wrappedMessage(code int, reason, message string) error {
	ge := &googleapi.Error{Code: code, Message: message, Errors: []googleapi.ErrorItem{{Reason: reason, Message: message}}}
	if ae, ok := apierror.FromError(ge); ok {
		return ae
	}
	return ge
}
