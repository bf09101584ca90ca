package backend

import (
	"strings"
	"testing"
)

func TestParseProviderID(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    ProviderID
		wantErr string
	}{
		"kubernetes":        {in: "kubernetes/prod/team-a/egress-1", want: ProviderID{Backend: KindKubernetes, Target: "prod", Scope: "team-a", Name: "egress-1"}},
		"gcp":               {in: "gcp/my-proj/europe-west1-b/egress-1", want: ProviderID{Backend: KindGCP, Target: "my-proj", Scope: "europe-west1-b", Name: "egress-1"}},
		"kvm":               {in: "kvm/local/egress-1", want: ProviderID{Backend: KindKVM, Target: "local", Name: "egress-1"}},
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
			got, err := ParseProviderID(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseProviderID(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseProviderID(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseProviderID(%q) = %#v, want %#v", tc.in, got, tc.want)
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
		id, err := ParseProviderID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("ParseProviderID(%q).String() = %q", s, id.String())
		}
		again, err := ParseProviderID(id.String())
		if err != nil || again != id {
			t.Fatalf("second parse of %q = %#v, %v; want %#v", s, again, err, id)
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("Validate of parsed %q: %v", s, err)
		}
	})
}
