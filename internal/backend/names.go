package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

// Label keys written on every object a backend makes. They are valid as Kubernetes label names, GCE label keys
// and libvirt metadata names alike, which is why they carry no DNS prefix.
const (
	LabelManagedBy = "egress-managed-by"
	LabelUID       = "egress-uid"
	LabelOwner     = "egress-owner"
	LabelName      = "egress-name"

	// ManagedByValue marks objects this provider made.
	ManagedByValue = "terraform-provider-egress"
)

// ReservedLabelKeys cannot be set by users: they would let a label forge ownership.
var ReservedLabelKeys = []string{LabelManagedBy, LabelUID, LabelOwner, LabelName}

// NamePrefix starts every derived name; it also makes names start with a letter.
const NamePrefix = "egress-"

// NameFromUID derives a name valid on every backend: lowercase letters, digits and hyphens, starting with a
// letter, 23 characters. The same UID always gives the same name, so a retried Create finds its own object.
func NameFromUID(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return NamePrefix + hex.EncodeToString(sum[:8])
}

// nameRE is the intersection of the naming rules: GCE resource names (RFC 1035 label, 63 chars),
// Kubernetes object names (DNS-1123 label) and libvirt domain and volume names.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateName reports why name cannot be used on every backend, or nil.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q must be 1 to 63 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen", name)
	}
	return nil
}

// Label keys and values must be valid as GCE labels and Kubernetes labels at once.
var (
	labelKeyRE   = regexp.MustCompile(`^[a-z]([-_a-z0-9]{0,61}[a-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]{0,61}[a-z0-9])?)?$`)
)

// ValidateLabelKey reports why key cannot be a user label key, or nil.
func ValidateLabelKey(key string) error {
	if !labelKeyRE.MatchString(key) {
		return fmt.Errorf("label key %q must be 1 to 63 lowercase letters, digits, '-' or '_', start with a letter and end with a letter or digit", key)
	}
	for _, r := range ReservedLabelKeys {
		if key == r {
			return fmt.Errorf("label key %q is reserved for the provider's own bookkeeping", key)
		}
	}
	return nil
}

// ValidateLabelValue reports why value cannot be a label value, or nil.
func ValidateLabelValue(value string) error {
	if !labelValueRE.MatchString(value) {
		return fmt.Errorf("label value %q must be at most 63 lowercase letters, digits, '-' or '_', and start and end with a letter or digit", value)
	}
	return nil
}

// ManagedLabels returns the labels every object of spec carries: the user's labels plus the bookkeeping ones.
func ManagedLabels(spec Spec) map[string]string {
	labels := make(map[string]string, len(spec.Labels)+4)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = ManagedByValue
	labels[LabelUID] = spec.UID
	labels[LabelOwner] = spec.Owner
	labels[LabelName] = spec.Name
	return labels
}

// UserLabels strips the bookkeeping labels from labels read back from a backend.
func UserLabels(labels map[string]string) map[string]string {
	user := make(map[string]string, len(labels))
	for k, v := range labels {
		user[k] = v
	}
	for _, r := range ReservedLabelKeys {
		delete(user, r)
	}
	return user
}
