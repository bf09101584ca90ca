package backend

import (
	"fmt"
	"regexp"
	"testing"
)

// Each backend's own naming rule, as its API documents it.
var backendNameRules = map[string]*regexp.Regexp{
	// Compute Engine resource names: RFC 1035.
	"gcp": regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`),
	// Kubernetes object names used for Deployments and Services: DNS-1035/1123 labels.
	"kubernetes": regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`),
	// libvirt domain and volume names: no slash, no whitespace; kept short for file names with suffixes.
	"kvm": regexp.MustCompile(`^[^/\s]{1,200}$`),
}

func TestNameFromUIDIsValidEverywhere(t *testing.T) {
	t.Parallel()
	uids := []string{"", "0", "8d5e6a54-1b0a-4f3c-9f47-3b1f1f0c2f11", "UPPER-case", "ünïcode", string(make([]byte, 1000))}
	for i := 0; i < 200; i++ {
		uids = append(uids, fmt.Sprintf("uid-%d", i))
	}
	seen := map[string]string{}
	for _, uid := range uids {
		name := NameFromUID(uid)
		if name != NameFromUID(uid) {
			t.Fatalf("NameFromUID(%q) is not deterministic", uid)
		}
		for backend, rule := range backendNameRules {
			if !rule.MatchString(name) {
				t.Errorf("NameFromUID(%q) = %q is not a valid %s name", uid, name, backend)
			}
		}
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(NameFromUID(%q)): %v", uid, err)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("NameFromUID(%q) and NameFromUID(%q) collide at %q", uid, other, name)
		}
		seen[name] = uid
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"egress-1": true, "a": true, "a-b-c": true,
		"": false, "1abc": false, "Abc": false, "abc-": false, "a_b": false, "a.b": false, "a/b": false,
		"a123456789012345678901234567890123456789012345678901234567890ab":  true,  // 63
		"a123456789012345678901234567890123456789012345678901234567890abc": false, // 64
	}
	for name, valid := range tests {
		if err := ValidateName(name); (err == nil) != valid {
			t.Errorf("ValidateName(%q) = %v, want valid=%v", name, err, valid)
		}
		if valid {
			for backend, rule := range backendNameRules {
				if !rule.MatchString(name) {
					t.Errorf("ValidateName accepts %q, which %s rejects", name, backend)
				}
			}
		}
	}
}

func TestLabels(t *testing.T) {
	t.Parallel()
	spec := Spec{Name: "egress-1", UID: "8d5e6a54-1b0a-4f3c-9f47-3b1f1f0c2f11", Owner: "team-a", Labels: map[string]string{"env": "prod"}}
	labels := ManagedLabels(spec)
	for k, v := range labels {
		if err := ValidateLabelValue(v); err != nil {
			t.Errorf("managed label %s=%q is not a valid label value: %v", k, v, err)
		}
	}
	if labels[LabelUID] != spec.UID || labels[LabelOwner] != "team-a" || labels[LabelManagedBy] != ManagedByValue || labels["env"] != "prod" {
		t.Errorf("ManagedLabels = %v", labels)
	}
	user := UserLabels(labels)
	if len(user) != 1 || user["env"] != "prod" {
		t.Errorf("UserLabels = %v, want only env=prod", user)
	}
	for _, k := range ReservedLabelKeys {
		if ValidateLabelKey(k) == nil {
			t.Errorf("reserved key %q is accepted as a user label", k)
		}
	}
}
