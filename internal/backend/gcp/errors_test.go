package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// wrapped makes a googleapi error the way the REST client returns it: inside an apierror.APIError.
func wrapped(code int, reason string) error {
	ge := &googleapi.Error{Code: code, Message: "msg"}
	if reason != "" {
		ge.Errors = []googleapi.ErrorItem{{Reason: reason, Message: "msg"}}
	}
	if ae, ok := apierror.FromError(ge); ok {
		return ae
	}
	return ge
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err  error
		want backend.Class
	}{
		"404":                         {wrapped(404, "notFound"), backend.ClassNotFound},
		"403 quotaExceeded":           {wrapped(403, "quotaExceeded"), backend.ClassQuota},
		"QUOTA_EXCEEDED reason":       {wrapped(403, "QUOTA_EXCEEDED"), backend.ClassQuota},
		"zone exhausted":              {wrapped(503, "ZONE_RESOURCE_POOL_EXHAUSTED"), backend.ClassQuota},
		"429 rateLimitExceeded":       {wrapped(429, "rateLimitExceeded"), backend.ClassTransient},
		"403 rateLimitExceeded":       {wrapped(403, "rateLimitExceeded"), backend.ClassTransient},
		"429 without reason":          {wrapped(429, ""), backend.ClassTransient},
		"500":                         {wrapped(500, "backendError"), backend.ClassTransient},
		"503 without reason":          {wrapped(503, ""), backend.ClassTransient},
		"resourceNotReady":            {wrapped(400, "resourceNotReady"), backend.ClassTransient},
		"address in use":              {wrapped(400, "resourceInUseByAnotherResource"), backend.ClassTransient},
		"412 fingerprint":             {wrapped(412, "conditionNotMet"), backend.ClassTransient},
		"400 invalid":                 {wrapped(400, "invalid"), backend.ClassPermanent},
		"401":                         {wrapped(401, "authError"), backend.ClassPermanent},
		"403 forbidden":               {wrapped(403, "forbidden"), backend.ClassPermanent},
		"409":                         {wrapped(409, "alreadyExists"), backend.ClassPermanent},
		"connection reset":            {fmt.Errorf("post: %w", syscall.ECONNRESET), backend.ClassTransient},
		"unexpected EOF":              {fmt.Errorf("read: %w", io.ErrUnexpectedEOF), backend.ClassTransient},
		"deadline":                    {context.DeadlineExceeded, backend.ClassTransient},
		"unknown":                     {errors.New("something else"), backend.ClassUnclassified},
		"already classified survives": {backend.Quota("", "x"), backend.ClassQuota},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("gcp instance x", tc.err)
			if got := backend.ClassOf(err); got != tc.want {
				t.Fatalf("class = %s, want %s (%v)", got, tc.want, err)
			}
			var classified *backend.Error
			if !errors.As(err, &classified) || classified.Object != "gcp instance x" {
				t.Fatalf("error %v does not name the instance", err)
			}
		})
	}
}

func TestOperationError(t *testing.T) {
	t.Parallel()
	item := func(code string, details ...*computepb.ErrorDetails) *computepb.Error {
		return &computepb.Error{Errors: []*computepb.Errors{{Code: proto.String(code), Message: proto.String("m"), ErrorDetails: details}}}
	}
	for name, tc := range map[string]struct {
		err      *computepb.Error
		want     backend.Class
		contains string
	}{
		"quota with its metric": {item("QUOTA_EXCEEDED", &computepb.ErrorDetails{QuotaInfo: &computepb.QuotaExceededInfo{
			MetricName: proto.String("compute.googleapis.com/cpus"), LimitName: proto.String("CPUS-per-project-region")}}), backend.ClassQuota, "compute.googleapis.com/cpus"},
		"zone exhausted": {item("ZONE_RESOURCE_POOL_EXHAUSTED"), backend.ClassQuota, "ZONE_RESOURCE_POOL_EXHAUSTED"},
		"not ready":      {item("RESOURCE_NOT_READY"), backend.ClassTransient, "RESOURCE_NOT_READY"},
		"bad image":      {item("INVALID_FIELD_VALUE"), backend.ClassPermanent, "INVALID_FIELD_VALUE"},
		// As a managed group's or a cluster's operations report it (public issue threads quote these words).
		"organization policy": {&computepb.Error{Errors: []*computepb.Errors{{Code: proto.String("CONDITION_NOT_MET"),
			Message: proto.String("Constraint constraints/compute.vmExternalIpAccess violated for project 1. Add instance projects/p/zones/z/instances/i to the constraint to use external IP with it.")}}},
			backend.ClassPermanent, "vmExternalIpAccess"},
		"none":            {nil, backend.ClassUnclassified, ""},
		"empty error set": {&computepb.Error{}, backend.ClassUnclassified, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := operationError("obj", tc.err)
			if got := backend.ClassOf(err); got != tc.want {
				t.Fatalf("class = %s, want %s", got, tc.want)
			}
			if err != nil && !contains(err.Error(), tc.contains) {
				t.Fatalf("%v does not name %s", err, tc.contains)
			}
			if name == "organization policy" && !contains(backend.AdviceOf(err), "allowed values") {
				t.Fatalf("advice %q does not say what to do", backend.AdviceOf(err))
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Check reports one of the documented reasons, whatever the API or the connection said.
func TestHealthReason(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		err  error
		want string
	}{
		"401":     {&googleapi.Error{Code: 401, Message: "bad token"}, backend.HealthUnauthorized},
		"403":     {&googleapi.Error{Code: 403, Message: "denied"}, backend.HealthUnauthorized},
		"404":     {&googleapi.Error{Code: 404, Message: "no such zone"}, backend.HealthNotFound},
		"500":     {&googleapi.Error{Code: 500, Message: "oops"}, backend.HealthError},
		"refused": {&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, backend.HealthUnreachable},
		"other":   {errors.New("something else"), backend.HealthError},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := healthReason(classify("gcp zone z", tt.err)); got != tt.want {
				t.Errorf("healthReason(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

// Compute Engine's own answers, as bodies on the wire, read the way the REST client reads them
// (googleapi.CheckResponse, then the apierror wrapper): the classes come from the real status and reason
// fields and wording, not from anything the fake made up.
func TestClassifyComputeEngineBodies(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		code            int
		reason, message string        // the error's, as the body says them
		want            backend.Class // of classify
		onCreate        backend.Class // after missingOnCreate
		wantObject      string        // the object missingOnCreate names, when it names another
	}{
		"instance missing":       {404, "notFound", "The resource 'projects/p/zones/europe-west1-b/instances/egress-1' was not found", backend.ClassNotFound, backend.ClassPermanent, ""},
		"zone missing on create": {404, "notFound", "The resource 'projects/p/zones/mars-1-a' was not found", backend.ClassNotFound, backend.ClassPermanent, "gcp zone mars-1-a in project p"},
		// What getGuestAttributes answers before the guest has written anything: not yet, never "the VM is gone".
		"guest attributes not written yet": {404, "notFound", "The resource 'egress/' of type 'Guest Attribute' was not found.", backend.ClassNotFound, backend.ClassPermanent, ""},
		"metadata changed meanwhile":       {412, "conditionNotMet", "Supplied fingerprint does not match current metadata fingerprint.", backend.ClassTransient, backend.ClassTransient, ""},
		"labels changed meanwhile":         {412, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed", backend.ClassTransient, backend.ClassTransient, ""},
		"address in use":                   {400, "resourceInUseByAnotherResource", "The address resource 'projects/p/regions/r/addresses/a' is already being used by 'projects/p/zones/z/instances/i'", backend.ClassTransient, backend.ClassTransient, ""},
		"invalid field":                    {400, "invalid", "Invalid value for field 'resource.name': 'Bad'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", backend.ClassPermanent, backend.ClassPermanent, ""},
		"required field":                   {400, "required", "Required field 'resource' not specified", backend.ClassPermanent, backend.ClassPermanent, ""},
		"unauthenticated":                  {401, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.", backend.ClassPermanent, backend.ClassPermanent, ""},
		"rate limited":                     {403, "rateLimitExceeded", "Rate Limit Exceeded", backend.ClassTransient, backend.ClassTransient, ""},
		"quota":                            {403, "quotaExceeded", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.", backend.ClassQuota, backend.ClassQuota, ""},
		"backend":                          {503, "backendError", "Internal error. Please try again or contact Google Support.", backend.ClassTransient, backend.ClassTransient, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The body Compute Engine answers with: the status again, the message, and the reason in errors[].
			body := fmt.Sprintf(`{"error":{"code":%d,"message":%q,"errors":[{"message":%q,"domain":"global","reason":%q}]}}`,
				tc.code, tc.message, tc.message, tc.reason)
			resp := &http.Response{StatusCode: tc.code, Header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
				Body: io.NopCloser(strings.NewReader(body))}
			err := googleapi.CheckResponse(resp)
			if ae, ok := apierror.FromError(err); ok {
				err = ae
			}
			const obj = "gcp instance egress-1 in project p, zone europe-west1-b"
			got := classify(obj, err)
			if backend.ClassOf(got) != tc.want {
				t.Fatalf("class %s, want %s: %v", backend.ClassOf(got), tc.want, got)
			}
			created := missingOnCreate("p", got)
			if backend.ClassOf(created) != tc.onCreate {
				t.Fatalf("on create: class %s, want %s: %v", backend.ClassOf(created), tc.onCreate, created)
			}
			var be *backend.Error
			if tc.wantObject != "" && (!errors.As(created, &be) || be.Object != tc.wantObject) {
				t.Errorf("on create: %v, want it about %s", created, tc.wantObject)
			}
		})
	}
}
