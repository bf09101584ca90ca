package libvirtconn

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// TestKnownHostKeyAlgorithms needs no libvirtd: it keeps what the kvm backend's TestLiveSSH found (a correct
// ed25519 entry failing as a mismatch against a host that also has an ECDSA key) fixed where the live tests
// do not run, for plain, hashed and @cert-authority entries.
func TestKnownHostKeyAlgorithms(t *testing.T) {
	t.Parallel()
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := ssh.NewPublicKey(edPub)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ssh.NewPublicKey(&ecKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	lines := strings.Join([]string{
		xknownhosts.Line([]string{"[h.example]:2222"}, ed),
		xknownhosts.Line([]string{"other.example"}, ec),
		xknownhosts.HashHostname("hashed.example") + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ed))),
		"@cert-authority *.ca.example " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ec))),
	}, "\n") + "\n"
	if err := os.WriteFile(known, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := knownhosts.NewDB(known)
	if err != nil {
		t.Fatal(err)
	}
	// x/crypto's first plain (not certificate) host key algorithm.
	i := slices.IndexFunc(ssh.SupportedAlgorithms().HostKeys, func(a string) bool { return !strings.Contains(a, "-cert-") })
	firstPlain := ssh.SupportedAlgorithms().HostKeys[i]
	tests := map[string]struct {
		addr  string
		first string
		cert  bool // whether certificates may be asked for
	}{
		"plain entry, odd port": {"h.example:2222", ssh.KeyAlgoED25519, false},
		"hashed entry":          {"hashed.example:22", ssh.KeyAlgoED25519, false},
		"certificate authority": {"db.ca.example:22", ssh.CertAlgoECDSA256v01, true},
		// Port 22 is written without brackets. A host known_hosts does not list gets x/crypto's plain key
		// order, without certificates: the error then shows the key it presented.
		"unknown host": {"h.example:22", firstPlain, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := hostKeyAlgorithms(db, tc.addr)
			if len(got) < 2 || got[0] != tc.first || !slices.Contains(got, ssh.KeyAlgoECDSA256) || !slices.Contains(got, ssh.KeyAlgoED25519) {
				t.Errorf("algorithms = %v, want %s first, the others after", got, tc.first)
			}
			if hasCert := slices.ContainsFunc(got, func(a string) bool { return strings.Contains(a, "-cert-") }); hasCert != tc.cert {
				t.Errorf("algorithms = %v: certificates asked for = %v, want %v", got, hasCert, tc.cert)
			}
		})
	}
}
