package guest

import (
	"os"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestMain hashes proxy passwords at bcrypt's minimum cost: the tests render up to proxyconf.MaxUsers users
// many times over, and at the real cost that bcrypt work was most of this package's CPU under the race
// detector. The hashes keep their form and length; proxyconf's own tests check the real cost.
func TestMain(m *testing.M) {
	proxyconf.CheapHashesForTests()
	os.Exit(m.Run())
}
