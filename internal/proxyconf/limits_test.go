package proxyconf

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestTLSListener: with tls set, the proxy port speaks TLS with the whole chain, clients that trust only the
// root CA get through it with their credentials, and the port answers nothing in clear.
func TestTLSListener(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp, tp := squidtest.Port(t, b.HTTP), squidtest.Port(t, b.TLS)
	ca := testutil.NewCA(t)
	chain, key := ca.Leaf(t)
	user, pass := "tls-user", "tls-password"
	sq := startSquid(t, Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/8"},
		AllowedDestinations: []string{"allowed.test"},
		AllowedPorts:        []int{tp, hp},
		Users:               []BasicAuth{{Username: user, Password: pass}},
		TLS:                 &TLSSettings{CertificatePEM: chain, PrivateKeyPEM: key},
	}, testHosts)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	goClient := func(userinfo *url.Userinfo) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "https", User: userinfo, Host: sq.Proxy}),
			TLSClientConfig: &tls.Config{RootCAs: roots},
		}}
	}
	for name, tc := range map[string]struct {
		user *url.Userinfo
		want int
	}{
		"with credentials":    {url.UserPassword(user, pass), 200},
		"wrong password":      {url.UserPassword(user, "not-the-password"), 407},
		"without credentials": {nil, 407},
	} {
		resp, err := goClient(tc.user).Get(fmt.Sprintf("http://allowed.test:%d/", hp))
		if err != nil {
			t.Errorf("%s: Go client through the https proxy: %v", name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end already
		if resp.StatusCode != tc.want || (tc.want == 200 && string(body) != "backend allowed.test") {
			t.Errorf("%s: got %d %.80q, want %d", name, resp.StatusCode, body, tc.want)
		}
	}

	// curl, as users run it: CONNECT through the TLS proxy, verifying the proxy against the root alone (-k
	// covers only the test backend behind the tunnel, whose certificate names example.com).
	rootFile := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(rootFile, []byte(ca.RootPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("curl", "-sS", "-k", "--max-time", "30", "--proxy", "https://"+sq.Proxy, "--proxy-cacert", rootFile,
		"--proxy-user", user+":"+pass, fmt.Sprintf("https://allowed.test:%d/", tp)).CombinedOutput()
	if err != nil || string(out) != "backend allowed.test" {
		t.Errorf("curl CONNECT through the https proxy: %v\n%s", err, out)
	}
	out, err = exec.Command("curl", "-sS", "--max-time", "30", "--proxy", "https://"+sq.Proxy, "--proxy-cacert", rootFile,
		"--proxy-user", user+":"+pass, "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://denied.test:%d/", hp)).CombinedOutput()
	if err != nil || string(out) != "403" {
		t.Errorf("curl to a host outside the list through the https proxy: %v\n%s", err, out)
	}

	// A plain-text request on the TLS port gets no HTTP answer.
	conn, err := squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.1"}.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // nothing is left to send
	if _, err := fmt.Fprintf(conn, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n%s\r\n", hp, squidtest.Client{User: user, Pass: pass}.AuthHeader()); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
		_ = resp.Body.Close() // only that there was one matters
		t.Errorf("the TLS port answered a plain-text request with %s", resp.Status)
	}
}

// TestMaxConnectionsPerClient: a client holding the limit's worth of connections is refused on the next one,
// with the reason in the log, while another client still gets through; closing one lets the first back in.
func TestMaxConnectionsPerClient(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp := squidtest.Port(t, b.HTTP)
	const limit = 3
	sq := startSquid(t, Settings{
		AllowedClientCIDRs:      []string{"127.0.0.0/8"},
		AllowedDestinations:     []string{"allowed.test"},
		AllowedPorts:            []int{hp},
		MaxConnectionsPerClient: limit,
	}, testHosts)
	target := fmt.Sprintf("http://allowed.test:%d/", hp)

	// keepAlive sends one request on a new connection from 'from' and leaves the connection open.
	keepAlive := func(from string) (net.Conn, int) {
		conn, err := squidtest.Client{Proxy: sq.Proxy, From: from}.Dial()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: allowed.test\r\n\r\n", target); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("from %s: %v", from, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // the status is what counts
		_ = resp.Body.Close()                 // drained
		return conn, resp.StatusCode
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close() // the test is over
		}
	})
	for i := range limit {
		conn, status := keepAlive("127.0.0.1")
		held = append(held, conn)
		if status != 200 {
			t.Fatalf("connection %d of %d: got %d, want 200", i+1, limit, status)
		}
	}
	c := squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.1"}
	if got := c.Get(t, target, "allowed.test"); got.Status != 403 {
		t.Errorf("connection beyond the limit: got %d, want 403", got.Status)
	}
	waitForLogMatch(t, sq, `client=127.0.0.1 .* status=403 .* reason=`+ReasonClientConnections+`$`)
	if got := (squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.2"}).Get(t, target, "allowed.test"); got.Status != 200 {
		t.Errorf("another client: got %d, want 200", got.Status)
	}
	// Once one connection closes, Squid counts one fewer; it notices the close on its own time, so ask until
	// it does.
	_ = held[0].Close() // closing is the point
	held = held[1:]
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := c.Get(t, target, "allowed.test")
		if got.Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing a connection: still %d", got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(sq.File("access.log"), "client=127.0.0.2") {
		t.Errorf("access log lacks the second client:\n%s", sq.File("access.log"))
	}
}
