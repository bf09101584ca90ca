package proxyconf

import (
	"fmt"

	"golang.org/x/crypto/bcrypt"
)

// htpasswdCost is bcrypt's work factor: its default, which the helper checks in tens of milliseconds, and
// Squid caches a good login for credentialsttl, so a check happens about once per client every few minutes.
const htpasswdCost = bcrypt.DefaultCost

// RenderHtpasswd renders the one-line htpasswd file basic_ncsa_auth reads. bcrypt is the strongest hash that
// helper understands: it checks passwords with crypt(3), and Debian's libxcrypt implements bcrypt ("$2b$",
// "$2y$"); the tests prove it against the installed helper. Each call salts anew, so the output differs on
// every run: callers that compare rendered files must compare with bcrypt, not bytes.
func RenderHtpasswd(a BasicAuth) ([]byte, error) {
	if err := ValidateUsername(a.Username); err != nil {
		return nil, err
	}
	if err := ValidatePassword(a.Password); err != nil {
		return nil, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(a.Password), htpasswdCost)
	if err != nil {
		return nil, fmt.Errorf("hashing the proxy password: %w", err)
	}
	return fmt.Appendf(nil, "%s:%s\n", a.Username, hash), nil
}
