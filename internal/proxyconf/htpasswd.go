package proxyconf

import (
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/crypto/bcrypt"
)

// htpasswdCost is bcrypt's work factor: its default, which the helper checks in tens of milliseconds, and
// Squid caches a good login for credentialsttl, so a check happens about once per client every few minutes.
const htpasswdCost = bcrypt.DefaultCost

// cheapHashes, set by CheapHashesForTests, makes RenderHtpasswd hash at bcrypt's minimum cost.
var cheapHashes atomic.Bool

// CheapHashesForTests makes RenderHtpasswd hash at bcrypt's minimum cost from now on in this process, for
// tests alone: a test that renders the largest settings hashes MaxUsers passwords per render, seconds of CPU
// each time under the race detector. The hashes keep their form and length ("$2a$04$" and 53 characters
// instead of "$2a$10$"), so sizes, HtpasswdMatches and Squid's helper treat them as they treat real ones;
// proxyconf's own tests keep the real cost and check it. Only _test.go files may call it
// (TestTestHooksOnlyInTests).
func CheapHashesForTests() {
	cheapHashes.Store(true)
}

// RenderHtpasswd renders the htpasswd file basic_ncsa_auth reads, one line per user in the order given. bcrypt is the strongest hash that
// helper understands: it checks passwords with crypt(3), and Debian's libxcrypt implements bcrypt ("$2b$",
// "$2y$"); the tests prove it against the installed helper. Each call salts anew, so the output differs on
// every run: callers that compare rendered files must compare with bcrypt, not bytes.
// An empty list is an error: a file without users would lock every client out, and no authentication is
// written as no file at all.
func RenderHtpasswd(users []BasicAuth) ([]byte, error) {
	if len(users) == 0 {
		return nil, fmt.Errorf("htpasswd needs at least one user")
	}
	if err := ValidateUsers(users); err != nil {
		return nil, err
	}
	cost := htpasswdCost
	if cheapHashes.Load() {
		cost = bcrypt.MinCost
	}
	var out []byte
	for _, a := range users {
		hash, err := bcrypt.GenerateFromPassword([]byte(a.Password), cost)
		if err != nil {
			return nil, fmt.Errorf("hashing the password of proxy user %q: %w", a.Username, err)
		}
		out = fmt.Appendf(out, "%s:%s\n", a.Username, hash)
	}
	return out, nil
}

// HtpasswdMatches reports whether file, an htpasswd file as RenderHtpasswd writes it, admits exactly users:
// one line for each of them that accepts their password, and no other line. Order does not count. Since every
// render salts anew, this is how a backend tells whether a guest's file already holds the wanted passwords;
// no users match only an empty file (a backend checks separately whether the file exists at all).
func HtpasswdMatches(file []byte, users []BasicAuth) bool {
	want := make(map[string]string, len(users))
	for _, u := range users {
		want[u.Username] = u.Password
	}
	if len(want) != len(users) {
		return false // a name twice: no file renders that
	}
	var lines []string
	if text := strings.TrimSpace(string(file)); text != "" {
		lines = strings.Split(text, "\n")
	}
	if len(lines) != len(users) {
		return false
	}
	for _, line := range lines {
		user, hash, ok := strings.Cut(line, ":")
		password, wanted := want[user]
		if !ok || !wanted || bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) != nil {
			return false
		}
		delete(want, user) // a second line of the same name finds it gone
	}
	return true
}
