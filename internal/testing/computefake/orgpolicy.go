package computefake

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// The organization policy constraints the fake models (R25, R26). Organization policies are set on an
// organization, folder or project through another API (Resource Manager's); the fake has tests set their
// effect on one project.
const (
	// ConstraintVMExternalIPAccess is a list constraint: the instances, by resource name, that may have an
	// external IP address.
	ConstraintVMExternalIPAccess = "constraints/compute.vmExternalIpAccess"
	// ConstraintDisableGuestAttributes is a boolean constraint: when enforced, the Compute API does not give
	// access to guest attributes.
	ConstraintDisableGuestAttributes = "constraints/compute.disableGuestAttributesAccess"
)

type orgPolicy struct {
	// externalIPAllowed is nil while vmExternalIpAccess is not set (every instance may have one), else the
	// instances that may: empty denies all.
	externalIPAllowed  []string
	guestAttributesOff bool
}

// SetVMExternalIPAccess sets constraints/compute.vmExternalIpAccess on project: only the instances named in
// allowed ("projects/P/zones/Z/instances/N") may have an external IP address; none when allowed is empty
// (the constraint's "Deny all"). nil removes the constraint.
func (s *Server) SetVMExternalIPAccess(project string, allowed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.orgPolicies[project]
	if allowed != nil {
		allowed = slices.Clone(allowed)
		if len(allowed) == 0 {
			allowed = []string{}
		}
	}
	p.externalIPAllowed = allowed
	s.orgPolicies[project] = p
}

// DisableGuestAttributesAccess enforces (or lifts) constraints/compute.disableGuestAttributesAccess on project.
func (s *Server) DisableGuestAttributesAccess(project string, enforced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.orgPolicies[project]
	p.guestAttributesOff = enforced
	s.orgPolicies[project] = p
}

// projectNumber is a stable stand-in for the project's number, which Compute Engine names in constraint
// violations where the request named the project's ID.
func projectNumber(project string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(project))
	return 100000000000 + h.Sum64()%900000000000
}

// DefaultServiceAccountEmail is the project's default compute service account, which an instance that names
// the account "default" runs as, and which it names by this email when read back (R27).
func DefaultServiceAccountEmail(project string) string {
	return fmt.Sprintf("%d-compute@developer.gserviceaccount.com", projectNumber(project))
}

// violation is Compute Engine's answer to a request an organization policy forbids: 412 conditionNotMet,
// "Constraint constraints/... violated for project NUMBER." and what to do.
func violation(constraint, project, detail string) *apiError {
	msg := fmt.Sprintf("Constraint %s violated for project %d.", constraint, projectNumber(project))
	if detail != "" {
		msg += " " + detail
	}
	return &apiError{http.StatusPreconditionFailed, "conditionNotMet", msg}
}

// externalIPViolation is R25's refusal of an instance with an access config that the project's
// vmExternalIpAccess does not list. The caller holds s.mu.
func (s *Server) externalIPViolation(project, zone string, in *computepb.Instance) *apiError {
	allowed := s.orgPolicies[project].externalIPAllowed
	if allowed == nil {
		return nil
	}
	hasExternal := false
	for _, nic := range in.GetNetworkInterfaces() {
		hasExternal = hasExternal || len(nic.GetAccessConfigs()) > 0
	}
	self := fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, in.GetName())
	if !hasExternal || slices.Contains(allowed, self) {
		return nil
	}
	return violation(ConstraintVMExternalIPAccess, project, fmt.Sprintf("Add instance %s to the constraint to use external IP with it.", self))
}

// guestAttributesViolation is R26's refusal of getGuestAttributes. The caller holds s.mu.
func (s *Server) guestAttributesViolation(project string) *apiError {
	if !s.orgPolicies[project].guestAttributesOff {
		return nil
	}
	return violation(ConstraintDisableGuestAttributes, project, "")
}
