package provider

import (
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// Ages read as people say them: the largest whole unit, and days only from two on, since "1d" hides whether
// a proxy is 24 or 47 hours old.
func TestAgeText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		age  time.Duration
		want string
	}{
		"seconds":               {59 * time.Second, "age 59s"},
		"a minute":              {time.Minute, "age 1m"},
		"minutes round down":    {59*time.Minute + 59*time.Second, "age 59m"},
		"hours":                 {3*time.Hour + 59*time.Minute, "age 3h"},
		"47 hours are hours":    {47 * time.Hour, "age 47h"},
		"two days":              {48 * time.Hour, "age 2d"},
		"clock skew is not < 0": {-time.Minute, "age 0s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := ageText(now.Add(-tc.age), now); got != tc.want {
				t.Errorf("ageText(%s) = %q, want %q", tc.age, got, tc.want)
			}
		})
	}
	if got := ageText(time.Time{}, now); got != "age unknown" {
		t.Errorf("unknown creation time: %q", got)
	}
}

func TestProxyFilter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	at := func(name string, age time.Duration, labels map[string]string) backend.Instance {
		return backend.Instance{ID: backend.ProviderID{Backend: kvm.Kind, Target: "h", Name: name}, Labels: labels, CreatedAt: now.Add(-age)}
	}
	all := []backend.Instance{
		at("young", time.Minute, map[string]string{"team": "ci"}),
		at("old", time.Hour, map[string]string{"team": "ci"}),
		at("known", time.Hour, nil),
		at("web", time.Hour, map[string]string{"team": "web"}),
	}
	tests := map[string]struct {
		filter proxyFilter
		want   []string
	}{
		"everything":                   {proxyFilter{}, []string{"known", "old", "web", "young"}},
		"orphans":                      {proxyFilter{orphanedOnly: true, known: map[string]bool{"kvm/h/known": true}, minAge: 10 * time.Minute}, []string{"old", "web"}},
		"known ids only with orphans":  {proxyFilter{known: map[string]bool{"kvm/h/known": true}}, []string{"known", "old", "web", "young"}},
		"labels":                       {proxyFilter{labels: map[string]string{"team": "ci"}}, []string{"old", "young"}},
		"labels and age":               {proxyFilter{labels: map[string]string{"team": "ci"}, minAge: 30 * time.Minute}, []string{"old"}},
		"a label value must match too": {proxyFilter{labels: map[string]string{"team": "db"}}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, inst := range tc.filter.selectFrom(all, now) {
				got = append(got, inst.ID.Name)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("selected %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("selected %v, want %v", got, tc.want)
				}
			}
		})
	}
}
