package proxyconf

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// squidEscape encodes a helper argument the way Squid does before writing it to an auth helper (RFC 1738).
func squidEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TestHtpasswdWithSquidHelper proves that the helper Squid runs, basic_ncsa_auth, accepts the bcrypt hashes
// Go writes ("$2a$") for the right password and refuses everything else.
func TestHtpasswdWithSquidHelper(t *testing.T) {
	t.Parallel()
	squidtest.Path(t)
	tests := map[string]BasicAuth{
		"plain":             {Username: "alice", Password: "correct horse"},
		"mixed case user":   {Username: "Egress.User_1-x", Password: "s3cret-password"},
		"colon and percent": {Username: "u", Password: "a:b%41%zz+c d"},
		"utf-8":             {Username: "u", Password: "pässwörd-ü"},
		"72 bytes":          {Username: "u", Password: strings.Repeat("Zz9!", 18)},
		"shell characters":  {Username: "u", Password: "$(id)`x`;'\"\\|&"},
	}
	for name, a := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			htpasswd, err := RenderHtpasswd([]BasicAuth{a})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(htpasswd), a.Password) || strings.Count(string(htpasswd), "\n") != 1 {
				t.Fatalf("htpasswd must be one line without the password: %q", htpasswd)
			}
			hash := strings.TrimSuffix(strings.TrimPrefix(string(htpasswd), a.Username+":"), "\n")
			if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(a.Password)); err != nil {
				t.Fatalf("hash does not verify: %v", err)
			}
			// The backends' tests hash at the minimum cost (CheapHashesForTests); what ships is the default.
			if cost, err := bcrypt.Cost([]byte(hash)); err != nil || cost != bcrypt.DefaultCost {
				t.Fatalf("hash cost %d (%v), want bcrypt's default %d", cost, err, bcrypt.DefaultCost)
			}
			file := filepath.Join(t.TempDir(), "passwd")
			squidtest.WriteSecretFile(t, file, htpasswd)
			// One helper process answers a line per query, as under Squid.
			queries := []helperQuery{
				{a.Username, a.Password, "OK"},
				{a.Username, a.Password + "x", "ERR"},
				{a.Username, a.Password[:len(a.Password)-1], "ERR"},
				{a.Username, "", "ERR"},
				{strings.ToUpper(a.Username) + "X", a.Password, "ERR"},
			}
			if len(a.Password) == 72 {
				// bcrypt reads 72 bytes and ignores the rest, so a longer guess with the right prefix passes.
				queries = append(queries[:1], queries[2:]...)
			}
			askHelper(t, file, queries)
		})
	}
}

type helperQuery struct{ user, pass, want string }

// askHelper asks one basic_ncsa_auth process about file, a line per query as under Squid, and fails on each
// answer that is not the query's want.
func askHelper(t *testing.T, file string, queries []helperQuery) {
	t.Helper()
	var in strings.Builder
	for _, q := range queries {
		fmt.Fprintf(&in, "%s %s\n", squidEscape(q.user), squidEscape(q.pass))
	}
	cmd := exec.Command(AuthHelperPath, file)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", AuthHelperPath, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(queries) {
		t.Fatalf("helper answered %q to %d queries", out, len(queries))
	}
	for i, q := range queries {
		if got := strings.Fields(lines[i])[0]; got != q.want {
			t.Errorf("user %q password %q: helper said %q, want %s", q.user, q.pass, lines[i], q.want)
		}
	}
}

// TestHtpasswdSeveralUsers proves that the helper admits each of several users with their own password
// only: not with another user's, and no name that is not in the file.
func TestHtpasswdSeveralUsers(t *testing.T) {
	t.Parallel()
	squidtest.Path(t)
	users := []BasicAuth{
		{Username: "alice", Password: "alice's password"},
		{Username: "bob", Password: "bob's password!"},
		{Username: "carol", Password: "carol's password"},
	}
	htpasswd, err := RenderHtpasswd(users)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(htpasswd), "\n"); got != len(users) {
		t.Fatalf("htpasswd has %d lines, want one per user (%d): %q", got, len(users), htpasswd)
	}
	file := filepath.Join(t.TempDir(), "passwd")
	squidtest.WriteSecretFile(t, file, htpasswd)
	var queries []helperQuery
	for i, u := range users {
		other := users[(i+1)%len(users)]
		queries = append(queries,
			helperQuery{u.Username, u.Password, "OK"},
			helperQuery{u.Username, other.Password, "ERR"},
		)
	}
	queries = append(queries, helperQuery{"dave", users[0].Password, "ERR"})
	askHelper(t, file, queries)
}

func TestRenderHtpasswdRejects(t *testing.T) {
	t.Parallel()
	good := BasicAuth{Username: "good", Password: "a good password"}
	for name, users := range map[string][]BasicAuth{
		"colon in user":       {{Username: "a:b", Password: "password"}},
		"newline in user":     {{Username: "a\nb", Password: "password"}},
		"empty user":          {{Username: "", Password: "password"}},
		"short password":      {{Username: "a", Password: "short"}},
		"newline password":    {{Username: "a", Password: "pass\nword"}},
		"73 bytes":            {{Username: "a", Password: strings.Repeat("x", 73)}},
		"no users":            nil,
		"same name twice":     {good, {Username: "good", Password: "another password"}},
		"second user invalid": {good, {Username: "b", Password: "short"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if out, err := RenderHtpasswd(users); err == nil {
				t.Errorf("rendered %q, want an error", out)
			}
		})
	}
}

func TestHtpasswdMatches(t *testing.T) {
	t.Parallel()
	alice := BasicAuth{Username: "alice", Password: "alice's password"}
	bob := BasicAuth{Username: "bob", Password: "bob's password!"}
	render := func(users ...BasicAuth) []byte {
		out, err := RenderHtpasswd(users)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	both, onlyAlice := render(alice, bob), render(alice)
	tests := map[string]struct {
		file  []byte
		users []BasicAuth
		want  bool
	}{
		"one user":                   {onlyAlice, []BasicAuth{alice}, true},
		"two users":                  {both, []BasicAuth{alice, bob}, true},
		"two users in another order": {both, []BasicAuth{bob, alice}, true},
		"a user missing":             {onlyAlice, []BasicAuth{alice, bob}, false},
		"an extra user":              {both, []BasicAuth{alice}, false},
		"another password":           {both, []BasicAuth{alice, {Username: "bob", Password: "a new password"}}, false},
		"one user's line twice":      {append(slices.Clone(onlyAlice), onlyAlice...), []BasicAuth{alice, bob}, false},
		"no users, empty file":       {nil, nil, true},
		"no users, a file":           {onlyAlice, nil, false},
		"not htpasswd":               {[]byte("alice\n"), []BasicAuth{alice}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := HtpasswdMatches(tc.file, tc.users); got != tc.want {
				t.Errorf("HtpasswdMatches = %v, want %v", got, tc.want)
			}
		})
	}
}
