package backend

import (
	"strings"
	"testing"
)

// testForms are three id forms as the backend packages declare theirs: two with a scope, one without.
var testForms = IDForms{
	{Kind: "kubernetes", Parts: []string{"cluster", "namespace", "name"}},
	{Kind: "gcp", Parts: []string{"project", "zone", "name"}},
	{Kind: "kvm", Parts: []string{"host", "name"}},
}

func TestIDFormsString(t *testing.T) {
	t.Parallel()
	if got, want := testForms.String(), "kubernetes/<cluster>/<namespace>/<name>, gcp/<project>/<zone>/<name> or kvm/<host>/<name>"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := testForms[2:].String(), "kvm/<host>/<name>"; got != want {
		t.Errorf("one form's String() = %q, want %q", got, want)
	}
}

func TestParseProviderID(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    ProviderID
		wantErr string
	}{
		"kubernetes":        {in: "kubernetes/prod/team-a/egress-1", want: ProviderID{Backend: "kubernetes", Target: "prod", Scope: "team-a", Name: "egress-1"}},
		"gcp":               {in: "gcp/my-proj/europe-west1-b/egress-1", want: ProviderID{Backend: "gcp", Target: "my-proj", Scope: "europe-west1-b", Name: "egress-1"}},
		"kvm":               {in: "kvm/local/egress-1", want: ProviderID{Backend: "kvm", Target: "local", Name: "egress-1"}},
		"unknown kind":      {in: "aws/x/y", wantErr: "must start with kubernetes/, gcp/ or kvm/"},
		"kvm with zone":     {in: "kvm/local/zone/egress-1", wantErr: "a kvm id has 2 parts"},
		"gcp without zone":  {in: "gcp/p/egress-1", wantErr: "a gcp id has 3 parts"},
		"empty part":        {in: "kvm//egress-1", wantErr: "is empty"},
		"space":             {in: "kvm/local/egress 1", wantErr: "contains a space"},
		"empty":             {in: "", wantErr: "must start with"},
		"trailing slash":    {in: "kvm/local/egress-1/", wantErr: "a kvm id has 2 parts"},
		"control character": {in: "kvm/lo\ncal/x", wantErr: "control character"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := testForms.Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("Parse(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
			if got.String() != tc.in {
				t.Errorf("String() = %q, want the input %q back", got.String(), tc.in)
			}
		})
	}
}

// FuzzProviderIDRoundTrip: whatever parses formats back to exactly the same string, and parses again to the
// same value.
func FuzzProviderIDRoundTrip(f *testing.F) {
	for _, seed := range []string{"kvm/local/egress-1", "gcp/p/z/n", "kubernetes/c/ns/n", "kvm//x", "gcp/a/b", "kvm/a/b/c", "kvm/é/ü"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := testForms.Parse(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, id.String())
		}
		again, err := testForms.Parse(id.String())
		if err != nil || again != id {
			t.Fatalf("second parse of %q = %#v, %v; want %#v", s, again, err, id)
		}
		if err := testForms.Validate(id); err != nil {
			t.Fatalf("Validate of parsed %q: %v", s, err)
		}
	})
}
