package provider

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The booted proxy enforces the destination guards and serves its port over TLS: names under an allowed domain
// that the namespace's DNS points at loopback, at the metadata address or at the proxy VM itself are refused,
// while the usual upstream gets through; curl reaches it with --proxy https://, verifying the certificate
// chain against the root CA alone, which proves the image's Squid sends the intermediate. A packet capture in
// the namespace shows those requests' credentials nowhere in clear, and shows them in a request to the proxy's
// plain port, the control. The key is given write-only: the booted Squid serving it proves the key reaches the
// guest without passing through state.
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
    certificate_pem            = %q
    private_key_pem_wo         = %q
    private_key_pem_wo_version = 1
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
				// From here on, what crosses the namespace's side of the proxy's network is recorded: the TLS
				// port's traffic in one capture, the plain health port's in another, for the control below.
				port, _ := strconv.Atoi(rs.Primary.Attributes["port"])
				tlsCapture := startProxyCapture(t, addr, port)
				plainCapture := startProxyCapture(t, addr, proxyconf.DefaultHealthPort)
				expectations := []proxyExpectation{
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
				}
				for _, e := range expectations {
					connect, status := proxiedTLS(t, proxy, caFile, e.credentials, e.url)
					if connect != e.connect || status != e.status {
						return fmt.Errorf("%s with credentials %q: CONNECT %s, status %s; want CONNECT %s, status %s",
							e.url, e.credentials, connect, status, e.connect, e.status)
					}
				}
				// The control: the same credentials sent in clear to the proxy's one plain port, the health port,
				// which refuses any proxied request but only after the request crossed the network.
				health := net.JoinHostPort(addr, strconv.Itoa(proxyconf.DefaultHealthPort))
				if connect, status := curlThrough(t, []string{"--proxy", "http://" + health}, good, "http://up.allowed.test/"); status != "403" {
					return fmt.Errorf("a proxied request to the health port %s: CONNECT %s, status %s; want status 403", health, connect, status)
				}
				return credentialsOffTheWire(t, tlsCapture, port, len(expectations), plainCapture)
			},
		}},
	})
}

// startProxyCapture records, inside the namespace, the TCP traffic between the namespace and port of the
// proxy VM at addr, on the interface the namespace reaches it through.
func startProxyCapture(t *testing.T, addr string, port int) *testutil.Capture {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e2eNetns(), "ip", "-o", "route", "get", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("the namespace's route to %s: %v\n%s", addr, err, out)
	}
	fields := strings.Fields(string(out))
	i := slices.Index(fields, "dev")
	if i < 0 || i+1 >= len(fields) {
		t.Fatalf("the namespace's route to %s names no interface: %s", addr, out)
	}
	return testutil.StartCapture(t, []string{"ip", "netns", "exec", e2eNetns()}, fields[i+1],
		fmt.Sprintf("tcp and host %s and port %d", addr, port))
}

// credentialsOffTheWire checks the captures of a test's requests: tlsConns connections to the TLS port, each
// TLS from its first byte with no trace of the credentials; and the control, the credentials sent to the plain
// port, where the same search finds them, which proves it would find a leak.
func credentialsOffTheWire(t *testing.T, tlsCapture *testutil.Capture, tlsPort, tlsConns int, plainCapture *testutil.Capture) error {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(e2eUser + ":" + e2ePass))
	secrets := [][]byte{[]byte("proxy-authorization"), []byte(e2ePass), []byte(basic)}
	conns := tlsCapture.WaitConns(t, uint16(tlsPort), tlsConns, 5*time.Minute) //nolint:gosec // a validated port
	if len(conns) != tlsConns {
		return fmt.Errorf("the capture holds %d connections to the TLS port, want one per request (%d)", len(conns), tlsConns)
	}
	var sent, received int
	for i, cn := range conns {
		for side, b := range map[string][]byte{"client": cn.ClientBytes, "proxy": cn.ServerBytes} {
			if len(b) < 2 || b[0] != 0x16 || b[1] != 0x03 {
				return fmt.Errorf("connection %d to the TLS port: the %s's first bytes are %.40q, not a TLS handshake record", i, side, b)
			}
		}
		if found := append(testutil.Readable(cn.ClientBytes, secrets), testutil.Readable(cn.ServerBytes, secrets)...); len(found) > 0 {
			return fmt.Errorf("connection %d to the TLS port carries %q in clear", i, found)
		}
		sent, received = sent+len(cn.ClientBytes), received+len(cn.ServerBytes)
	}
	// Every captured byte, packet by packet, headers included: this covers any packet the reassembly left out.
	if found := testutil.Readable(tlsCapture.Raw(), secrets); len(found) > 0 {
		return fmt.Errorf("the capture of the TLS port holds %q in clear", found)
	}
	control := plainCapture.WaitConns(t, proxyconf.DefaultHealthPort, 1, 5*time.Minute)
	want := "Proxy-Authorization: Basic " + basic + "\r\n"
	if len(control) != 1 || len(testutil.Readable(control[0].ClientBytes, secrets)) < 2 || !bytes.Contains(control[0].ClientBytes, []byte(want)) {
		return fmt.Errorf("the control: the capture of the plain port lacks %q, so the capture would miss a leak; it holds %d connection(s)", want, len(control))
	}
	if found := testutil.Readable(plainCapture.Raw(), secrets); len(found) < 2 {
		return fmt.Errorf("the control: the raw capture of the plain port shows only %q, want the header and its value", found)
	}
	t.Logf("captured %d connections to the TLS port (%d bytes from the client, %d from the proxy): no credentials in clear; the plain port's capture shows them",
		len(conns), sent, received)
	return nil
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
