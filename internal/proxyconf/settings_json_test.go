package proxyconf

import (
	"encoding/json"
	"slices"
	"testing"
)

// Settings stored by a version before several users hold "Auth"; they read back as that one user. Settings
// of today round-trip.
func TestSettingsJSONOfEveryVersion(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		json      string
		wantUsers []string
	}{
		"earlier, one user":      {`{"Port":3128,"AllowedDestinations":["a.io"],"Auth":{"Username":"u","Password":""}}`, []string{"u"}},
		"earlier, no user":       {`{"Port":3128,"AllowedDestinations":["a.io"],"Auth":null}`, nil},
		"earlier, no Auth field": {`{"Port":3128,"AllowedDestinations":["a.io"]}`, nil},
		"today, two users":       {`{"Port":3128,"AllowedDestinations":["a.io"],"Users":[{"Username":"a","Password":""},{"Username":"b","Password":""}]}`, []string{"a", "b"}},
		"today, no users":        {`{"Port":3128,"AllowedDestinations":["a.io"],"Users":null}`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var s Settings
			if err := json.Unmarshal([]byte(tc.json), &s); err != nil {
				t.Fatal(err)
			}
			if got := Usernames(s.Users); !slices.Equal(got, tc.wantUsers) {
				t.Errorf("users %q, want %q", got, tc.wantUsers)
			}
			if s.Port != 3128 || !slices.Equal(s.AllowedDestinations, []string{"a.io"}) {
				t.Errorf("the other settings did not read: %+v", s)
			}
		})
	}
	// Today's form round-trips, rule sets and all.
	want := Settings{Port: 3128, Users: []BasicAuth{{Username: "a"}, {Username: "b"}}, DeniedDestinations: []string{"bad.io"},
		RuleSets: []RuleSet{{Name: "r", Clients: RuleSetClients{Users: []string{"a"}}, Destinations: []string{"a.io"}, Mode: RuleSetReport}},
		TLS:      &TLSSettings{CertificatePEM: "c", ClientCAPEM: "ca"}}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got Settings
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if gb, _ := json.Marshal(got); string(gb) != string(b) {
		t.Errorf("round trip:\n got %s\nwant %s", gb, b)
	}
}
