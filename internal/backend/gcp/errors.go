package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// classify gives err a class and names the object, keeping the API's message whole. An error already
// classified keeps its class, and gets the object only when it had none.
func classify(object string, err error) error {
	return backend.Classify(object, err, func(err error) (backend.Class, string) { return classOf(err), "" }, func(e *backend.Error) {
		orgPolicyAdvice(e)
		permissionAdvice(e) // permissions.go
	})
}

// Compute Engine refuses what an organization policy forbids with 412 conditionNotMet, the reason it also
// gives a stale fingerprint (which a retry cures), and names the constraint only in the message: "Constraint
// constraints/compute.vmExternalIpAccess violated for project 123. ...". No retry lifts a policy, and only its
// administrator can: Permanent, with what the constraint means for a proxy.
var constraintRE = regexp.MustCompile(`Constraint (constraints/[A-Za-z0-9_.]+) violated`)

// orgPolicyAdvices say, per constraint, what it stops and what the user can do. A constraint not listed
// gets the general words.
var orgPolicyAdvices = map[string]string{
	"constraints/compute.vmExternalIpAccess": "The organization policy constraints/compute.vmExternalIpAccess does not allow this VM an " +
		"external IP address, and a proxy VM always has one: it is the address its traffic leaves from (egress_address). " +
		"Ask the policy's administrator to add the instance the message names (projects/PROJECT/zones/ZONE/instances/NAME, " +
		"with the proxy's name) to the constraint's allowed values, or place the proxy in a project where the constraint allows it.",
	"constraints/compute.disableGuestAttributesAccess": "The organization policy constraints/compute.disableGuestAttributesAccess " +
		"is enforced on the project: the provider cannot read the guest attribute where the VM's startup script reports the " +
		"config it applied, so it cannot wait for the proxy (wait_for_proxy) nor confirm a change of rules made in place. " +
		"Set gcp.wait_for_proxy = false to create without waiting, and ask the policy's administrator to lift the " +
		"constraint on this project for changes of rules to complete.",
}

// orgPolicyAdvice makes an organization policy's refusal Permanent, with its advice.
func orgPolicyAdvice(e *backend.Error) {
	constraint := violatedConstraint(e.Err)
	if constraint == "" {
		return
	}
	e.Class = backend.ClassPermanent
	e.Advice = orgPolicyAdvices[constraint]
	if e.Advice == "" {
		e.Advice = "The organization policy " + constraint + " forbids this request; only the policy's administrator can change it for the project."
	}
}

// violatedConstraint names the constraint a 412 from Compute Engine says was violated, or "".
func violatedConstraint(err error) string {
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusPreconditionFailed {
		return ""
	}
	texts := []string{ge.Message}
	for _, item := range ge.Errors {
		texts = append(texts, item.Message)
	}
	for _, t := range texts {
		if m := constraintRE.FindStringSubmatch(t); m != nil {
			return m[1]
		}
	}
	return ""
}

// Reasons Compute Engine puts in an error body's errors[].reason.
var (
	quotaReasons     = map[string]bool{"quotaExceeded": true, "QUOTA_EXCEEDED": true, "ZONE_RESOURCE_POOL_EXHAUSTED": true, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": true}
	transientReasons = map[string]bool{
		"rateLimitExceeded": true, "userRateLimitExceeded": true, "resourceNotReady": true, "backendError": true,
		"internalError": true, "resourceInUseByAnotherResource": true, "conditionNotMet": true,
	}
)

// classOf reads the HTTP code and reasons with errors.As into *googleapi.Error: the apierror wrapper the client
// adds loses the reason of Compute Engine's bodies, the googleapi error inside it keeps them.
func classOf(err error) backend.Class {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		for _, item := range ge.Errors {
			switch {
			case quotaReasons[item.Reason]:
				return backend.ClassQuota
			case transientReasons[item.Reason]:
				return backend.ClassTransient
			}
		}
		switch {
		case ge.Code == http.StatusNotFound:
			return backend.ClassNotFound
		case ge.Code == http.StatusTooManyRequests, ge.Code >= 500, ge.Code == http.StatusPreconditionFailed:
			return backend.ClassTransient
		default:
			return backend.ClassPermanent
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return backend.ClassTransient
	}
	// The transport: a refused, reset or dropped connection, an answer cut short.
	var ne net.Error
	var errno syscall.Errno
	if errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.ClassTransient
	}
	return backend.ClassUnclassified
}

// operationError turns an operation's own error (DONE with error: QUOTA_EXCEEDED and the like) into a
// classified error. The client's error for it has an empty Errors list, so the operation is the only place
// that says what went wrong.
func operationError(object string, e *computepb.Error) error {
	if e == nil || len(e.GetErrors()) == 0 {
		return nil
	}
	class := backend.ClassPermanent
	var msgs []string
	advice := ""
	for _, item := range e.GetErrors() {
		code := item.GetCode()
		msg := code + ": " + item.GetMessage()
		switch {
		case code == "QUOTA_EXCEEDED":
			class = backend.ClassQuota
			for _, d := range item.GetErrorDetails() {
				if q := d.GetQuotaInfo(); q != nil {
					msg += " (metric " + q.GetMetricName() + ", limit " + q.GetLimitName() + ")"
				}
			}
		case strings.HasPrefix(code, "ZONE_RESOURCE_POOL_EXHAUSTED"):
			class = backend.ClassQuota
		case code == "CONDITION_NOT_MET":
			if m := constraintRE.FindStringSubmatch(item.GetMessage()); m != nil {
				advice = orgPolicyAdvices[m[1]]
			}
		case code == "RESOURCE_NOT_READY", code == "INTERNAL_ERROR", code == "RESOURCE_OPERATION_RATE_EXCEEDED", code == "OPERATION_CANCELED_BY_USER":
			if class == backend.ClassPermanent {
				class = backend.ClassTransient
			}
		}
		msgs = append(msgs, msg)
	}
	return &backend.Error{Class: class, Object: object, Err: errors.New("operation failed: " + strings.Join(msgs, "; ")), Advice: advice}
}

// isConflict reports whether err is the API's 409 alreadyExists.
func isConflict(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusConflict
}

// missingRE finds what Compute Engine names in a 404: "The resource 'projects/p/zones/z' was not found".
var missingRE = regexp.MustCompile(`[Tt]he resource '([^']+)' was not found`)

// missingKinds are the resources a create refers to, by their collection in a resource path: what the user
// calls one, and what to do when it is missing.
var missingKinds = map[string]struct{ what, advice string }{
	"zones":        {"zone", "Set gcp.zone (or the project's default_zone) to a zone that exists (gcloud compute zones list), then apply again."},
	"regions":      {"region", "Set gcp.zone (or the project's default_zone) to a zone of a region that exists (gcloud compute regions list), then apply again."},
	"networks":     {"network", "Create the network first, or set gcp.network to one that exists, then apply again."},
	"subnetworks":  {"subnetwork", "Create the subnetwork first, or set gcp.subnetwork to one that exists in the zone's region, then apply again."},
	"images":       {"image", "Set gcp.image to an image or image family that exists and that the project may use, then apply again."},
	"machineTypes": {"machine type", "Set gcp.machine_type to a machine type the zone offers (gcloud compute machine-types list --zones ZONE), then apply again."},
	"addresses":    {"address", "Reserve the address first, or set gcp.egress_address_name to one that exists in the zone's region, then apply again."},
}

// missingOnCreate is what a NotFound met while creating means: not the proxy gone (it is being made) but
// something it refers to missing, a zone, region, network, subnetwork, image, machine type or address. No
// retry brings that: Permanent, about the missing resource, with what to do. Other errors pass unchanged.
func missingOnCreate(project string, err error) error {
	if backend.ClassOf(err) != backend.ClassNotFound {
		return err
	}
	object, inner := "", err
	var be *backend.Error
	if errors.As(err, &be) {
		object, inner = be.Object, be.Err
	}
	m := missingRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &backend.Error{Class: backend.ClassPermanent, Object: object,
			Err:    fmt.Errorf("refers to something that does not exist in project %s: %w", project, inner),
			Advice: "Check the zone, network, subnetwork, image and machine type of the placement, then apply again."}
	}
	parts := strings.Split(m[1], "/")
	for i := len(parts) - 2; i >= 0; i-- {
		if k, ok := missingKinds[parts[i]]; ok {
			missing := fmt.Sprintf("gcp %s %s in project %s", k.what, strings.Join(parts[i+1:], "/"), project)
			return &backend.Error{Class: backend.ClassPermanent, Object: missing,
				Err: fmt.Errorf("does not exist, so %s cannot be made: %w", object, inner), Advice: k.advice}
		}
	}
	return &backend.Error{Class: backend.ClassPermanent, Object: object,
		Err:    fmt.Errorf("%s does not exist: %w", m[1], inner),
		Advice: fmt.Sprintf("Create %s first, or correct the placement that names it, then apply again.", m[1])}
}
