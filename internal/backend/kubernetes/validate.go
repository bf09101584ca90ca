package kubernetes

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// The checks below are the API server's rules for what a placement sets, so that the provider can refuse at
// plan time what the API server would refuse only at apply (or, for an image, what no node could ever pull).
// The backend runs the same checks before it sends anything.

// standardContainerResources are the resources without a domain a container may ask for; huge pages are
// hugepages-<page size>.
var standardContainerResources = []string{"cpu", "memory", "ephemeral-storage"}

const hugePagesPrefix = "hugepages-"

// ValidateResource checks one entry of the container's requests or limits: a resource a container can ask
// for, and a quantity the API server accepts for it.
func ValidateResource(name, quantity string) error {
	if err := validateResourceName(name); err != nil {
		return err
	}
	q, err := resource.ParseQuantity(quantity)
	if err != nil {
		return fmt.Errorf("resource %s: %q is not a quantity such as 100m, 0.5, 128Mi or 1G", name, quantity)
	}
	if q.Sign() < 0 {
		return fmt.Errorf("resource %s: %q is negative", name, quantity)
	}
	if isExtendedResource(name) && q.MilliValue()%1000 != 0 {
		return fmt.Errorf("resource %s: %q must be a whole number: extended resources are counted in whole devices", name, quantity)
	}
	return nil
}

// ValidateRequestWithinLimit checks a request against the limit of the same resource ("" when none is set):
// no request may exceed its limit, and huge pages and extended resources cannot be overcommitted, so their
// request needs a limit, equal to it.
func ValidateRequestWithinLimit(name, request, limit string) error {
	fixed := isExtendedResource(name) || strings.HasPrefix(name, hugePagesPrefix)
	if limit == "" {
		if fixed {
			return fmt.Errorf("resource %s: a request needs a limit equal to it: the resource cannot be overcommitted", name)
		}
		return nil
	}
	// A quantity that does not parse is ValidateResource's to report, with what is wrong with it: this check
	// only compares two that do.
	req, reqErr := resource.ParseQuantity(request)
	lim, limErr := resource.ParseQuantity(limit)
	if reqErr != nil || limErr != nil {
		return nil //nolint:nilerr // ValidateResource reports it
	}
	switch {
	case fixed && req.Cmp(lim) != 0:
		return fmt.Errorf("resource %s: request %s must equal the limit %s: the resource cannot be overcommitted", name, request, limit)
	case req.Cmp(lim) > 0:
		return fmt.Errorf("resource %s: request %s is more than the limit %s", name, request, limit)
	}
	return nil
}

// validateResourceName follows the API server's rule for container resources: cpu, memory,
// ephemeral-storage or hugepages-<size> without a domain, or an extended resource named with one
// (example.com/dongle) outside the kubernetes.io domains.
func validateResourceName(name string) error {
	if msgs := content.IsLabelKey(name); len(msgs) > 0 {
		return fmt.Errorf("resource name %q: %s", name, strings.Join(msgs, "; "))
	}
	domain, _, qualified := strings.Cut(name, "/")
	switch {
	case !qualified && strings.HasPrefix(name, hugePagesPrefix):
		if _, err := resource.ParseQuantity(strings.TrimPrefix(name, hugePagesPrefix)); err != nil {
			return fmt.Errorf("resource name %q: huge pages are named hugepages-<page size>, such as hugepages-2Mi", name)
		}
	case !qualified:
		for _, s := range standardContainerResources {
			if name == s {
				return nil
			}
		}
		return fmt.Errorf("resource name %q is not one a container can ask for: use %s, hugepages-<size>, or an extended resource with its domain such as example.com/dongle",
			name, strings.Join(standardContainerResources, ", "))
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return fmt.Errorf("resource name %q is in a kubernetes.io domain, which holds no resource a container can ask for", name)
	}
	return nil
}

// isExtendedResource reports a resource named with a domain: a device plugin's or a cluster's own.
func isExtendedResource(name string) bool { return strings.Contains(name, "/") }

// ValidateNodeSelectorKey accepts a label key, the API server's rule for a node selector's keys.
func ValidateNodeSelectorKey(key string) error {
	if msgs := content.IsLabelKey(key); len(msgs) > 0 {
		return fmt.Errorf("label key %q: %s", key, strings.Join(msgs, "; "))
	}
	return nil
}

// ValidateNodeSelectorValue accepts a label value, the API server's rule for a node selector's values.
func ValidateNodeSelectorValue(value string) error {
	if msgs := content.IsLabelValue(value); len(msgs) > 0 {
		return fmt.Errorf("label value %q: %s", value, strings.Join(msgs, "; "))
	}
	return nil
}

// The grammar of an image reference, as github.com/distribution/reference (which the kubelet uses to parse
// images) writes it, restated here because the provider does not otherwise depend on that module:
//
//	reference  := name [ ":" tag ] [ "@" digest ]
//	name       := [ domain "/" ] path-component [ "/" path-component ]*
//	domain     := host [ ":" port ]  (a first component with a "." or ":", "localhost", or an uppercase letter)
//	path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
//	tag        := [\w][\w.-]{0,127}
//	digest     := algorithm ":" hex (32 or more hex digits)
var (
	imageDomainRE = regexp.MustCompile(`^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	imagePathRE   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	imageTagRE    = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	imageDigestRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$`)
)

// maxImageName is the reference grammar's limit on the name (domain and path) of an image.
const maxImageName = 255

// ValidateImage accepts an image reference the kubelet can parse: [registry[:port]/]path[:tag][@digest].
func ValidateImage(ref string) error {
	if err := validateImage(ref); err != nil {
		return fmt.Errorf("image %q is not an image reference such as registry.example/team/squid:6: %w", ref, err)
	}
	return nil
}

func validateImage(ref string) error {
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !imageDigestRE.MatchString(digest) {
		return fmt.Errorf("digest %q must be algorithm:hex, such as sha256:<64 hex digits>", digest)
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag := name[i+1:]
		if !imageTagRE.MatchString(tag) {
			return fmt.Errorf("tag %q must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'", tag)
		}
		name = name[:i]
	}
	if name == "" {
		return errors.New("the name is empty")
	}
	if len(name) > maxImageName {
		return fmt.Errorf("the name is longer than %d characters", maxImageName)
	}
	path := name
	if first, rest, ok := strings.Cut(name, "/"); ok && isImageDomain(first) {
		if !imageDomainRE.MatchString(first) {
			return fmt.Errorf("registry %q is not a host name or address with an optional port", first)
		}
		path = rest
	}
	for _, c := range strings.Split(path, "/") {
		if !imagePathRE.MatchString(c) {
			return fmt.Errorf("path component %q must be lowercase letters and digits, separated by '.', '_', '__' or '-'", c)
		}
	}
	return nil
}

// isImageDomain is the reference package's rule for telling a registry from the first path component.
func isImageDomain(first string) bool {
	return strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first
}

// ErrInsecureWithCA is client-go's refusal of a cluster that both trusts a CA and skips verification.
var ErrInsecureWithCA = errors.New("client-go refuses a root certificate together with skipping verification: " +
	"remove cluster_ca_certificate to skip verification, or insecure to verify against the CA")
