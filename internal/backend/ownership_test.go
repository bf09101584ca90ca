package backend

import (
	"context"
	"strings"
	"testing"
)

func TestOwnershipCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		want       Ownership
		owner, uid string
		refused    bool
		names      []string
	}{
		"same owner and proxy":     {Ownership{"a", "u1"}, "a", "u1", false, nil},
		"nothing expected":         {Ownership{}, "b", "u2", false, nil},
		"owner only (an import)":   {Ownership{Owner: "a"}, "a", "u9", false, nil},
		"another owner":            {Ownership{"a", "u1"}, "b", "u2", true, []string{`"a"`, `"b"`, "u1", "u2"}},
		"another owner, same uid":  {Ownership{"a", "u1"}, "b", "u1", true, []string{`"a"`, `"b"`}},
		"same owner, another uid":  {Ownership{"a", "u1"}, "a", "u2", true, []string{"u1", "u2"}},
		"unlabelled object":        {Ownership{"a", "u1"}, "", "", true, []string{"did not make"}},
		"import of another's":      {Ownership{Owner: "a"}, "b", "u2", true, []string{`"a"`, `"b"`, "u2"}},
		"uid expected, none found": {Ownership{UID: "u1"}, "a", "", true, []string{"u1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.want.Check("obj", tc.owner, tc.uid)
			if (err != nil) != tc.refused {
				t.Fatalf("Check = %v, refused want %v", err, tc.refused)
			}
			if err == nil {
				return
			}
			if ClassOf(err) != ClassPermanent || AdviceOf(err) == "" {
				t.Errorf("Check = %v (advice %q), want Permanent with advice", err, AdviceOf(err))
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("Check = %v, want it to name %s", err, n)
				}
			}
		})
	}
}

func TestOwnershipTravelsOnTheContext(t *testing.T) {
	t.Parallel()
	if o := OwnershipOf(context.Background()); o != (Ownership{}) {
		t.Fatalf("OwnershipOf(empty) = %+v", o)
	}
	o := Ownership{Owner: "a", UID: "u"}
	if got := OwnershipOf(WithOwnership(context.Background(), o)); got != o {
		t.Fatalf("OwnershipOf = %+v, want %+v", got, o)
	}
}
