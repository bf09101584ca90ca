package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// The booted proxy enforces the destination guards and serves its port over TLS: names under an allowed domain
// that the namespace's DNS points at loopback, at the metadata address or at the proxy VM itself are refused,
// while the usual upstream gets through; curl reaches it with --proxy https://, verifying the certificate
// chain against the root CA alone, which proves the image's Squid sends the intermediate.
func TestAccProxyKVM_bootedProxyGuardsAndTLS(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := os.Getenv("EGRESS_TEST_IMAGE")
	if image == "" {
		t.Fatal("EGRESS_TEST_IMAGE must name the proxy image: `make image` builds it, `make testacc` sets it")
	}
	startUpstreams(t)
	addDNSHosts(t, uri, "up.allowed.test", "denied.test")
	addDNSHostAt(t, uri, "127.0.0.1", "loopback.allowed.test")
	addDNSHostAt(t, uri, "169.254.169.254", "metadata.allowed.test")
	caFile, chain, key := e2eProxyCertificate(t)
	owner := "e2e-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	good := e2eUser + ":" + e2ePass
	config := kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "e2e" {
  kvm = {
    image_file = %q
    memory_mib = 512
  }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".allowed.test"]
  auth = {
    username = %q
    password = %q
  }
  tls = {
    certificate_pem = %q
    private_key_pem = %q
  }
  timeouts {
    create = "20m"
  }
}
`, image, e2eUser, e2ePass, chain, key)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{{
			Config: config,
			Check: func(s *terraform.State) error {
				rs := s.RootModule().Resources["egress_proxy.e2e"]
				addr := rs.Primary.Attributes["internal_address"]
				proxy := "https://" + net.JoinHostPort(addr, rs.Primary.Attributes["port"])
				if rs.Primary.Attributes["proxy_url"] != proxy {
					return fmt.Errorf("proxy_url %q, want %s", rs.Primary.Attributes["proxy_url"], proxy)
				}
				// The proxy's own address becomes a name only now that it is known.
				addDNSHostAt(t, uri, addr, "self.allowed.test")
				waitUntilServingTLS(t, proxy, caFile)
				for _, e := range []proxyExpectation{
					{"http://up.allowed.test/", good, "000", "200"},
					{"https://up.allowed.test/", good, "200", "200"},
					{"http://up.allowed.test/", "", "000", "407"},
					{"http://denied.test/", good, "000", "403"},
					{"http://loopback.allowed.test/", good, "000", "403"},
					{"https://loopback.allowed.test/", good, "403", "000"},
					{"http://metadata.allowed.test/", good, "000", "403"},
					{"https://metadata.allowed.test/", good, "403", "000"},
					{"http://self.allowed.test/", good, "000", "403"},
					{"https://self.allowed.test/", good, "403", "000"},
				} {
					connect, status := proxiedTLS(t, proxy, caFile, e.credentials, e.url)
					if connect != e.connect || status != e.status {
						return fmt.Errorf("%s with credentials %q: CONNECT %s, status %s; want CONNECT %s, status %s",
							e.url, e.credentials, connect, status, e.connect, e.status)
					}
				}
				return nil
			},
		}},
	})
}

// proxiedTLS is proxied through a TLS proxy whose certificate curl verifies against caFile.
func proxiedTLS(t *testing.T, proxy, caFile, credentials, url string) (connect, status string) {
	t.Helper()
	return curlThrough(t, []string{"--proxy", proxy, "--proxy-cacert", caFile}, credentials, url)
}

func waitUntilServingTLS(t *testing.T, proxy, caFile string) {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(12 * time.Minute); ; time.Sleep(5 * time.Second) {
		// Any answer will do: it comes over a verified TLS connection from Squid with the rendered config.
		if _, status := proxiedTLS(t, proxy, caFile, "", "http://denied.test/"); status != "000" {
			t.Logf("proxy %s answered %v after the apply", proxy, time.Since(start).Round(time.Second))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy %s did not answer over TLS within 12 minutes of the apply", proxy)
		}
	}
}

// e2eProxyCertificate makes a root CA, an intermediate and a proxy certificate signed by the intermediate. The
// proxy's DHCP address is not known before it boots, so the certificate names every address of the test
// network's DHCP range (198.18.0.100 to .254, scripts/libvirt-env.sh). It returns the root's file, the chain
// (proxy certificate, then intermediate) and the key.
func e2eProxyCertificate(t *testing.T) (caFile, chainPEM, keyPEM string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	sign := func(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, string) {
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	rootKey, interKey, leafKey := newKey(), newKey(), newKey()
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	}
	rootTmpl := caTmpl("egress e2e root")
	root, rootPEM := sign(rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	inter, interPEM := sign(caTmpl("egress e2e intermediate"), root, &interKey.PublicKey, rootKey)
	leafTmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "egress e2e proxy"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for i := 100; i <= 254; i++ {
		leafTmpl.IPAddresses = append(leafTmpl.IPAddresses, net.IPv4(198, 18, 0, byte(i)))
	}
	_, leafPEM := sign(leafTmpl, inter, &leafKey.PublicKey, interKey)
	der, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(caFile, []byte(rootPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile, leafPEM + interPEM, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}
