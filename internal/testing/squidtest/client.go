package squidtest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Client speaks to Squid by hand, so each test controls the source address, the request line and the
// credentials exactly.
type Client struct {
	Proxy       string
	From        string // source IP, on 127.0.0.0/8
	User, Pass  string
	Timeout     time.Duration // for the whole exchange; 15 s when zero
	TLSRoots    *x509.CertPool
	TLSHostname string // the name in the TLS server's certificate
}

// Result is what came back: the proxy's status, or, through an established CONNECT tunnel, the status and
// body of the TLS server behind it.
type Result struct {
	Status int
	Body   string
}

// Dial connects to the proxy from c.From, with the exchange's deadline set.
func (c Client) Dial() (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.From)}}
	conn, err := d.Dial("tcp", c.Proxy)
	if err != nil {
		return nil, err
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	return conn, conn.SetDeadline(time.Now().Add(timeout))
}

// AuthHeader is the Proxy-Authorization header line of c's credentials, or "" without a user.
func (c Client) AuthHeader() string {
	if c.User == "" {
		return ""
	}
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(c.User+":"+c.Pass)) + "\r\n"
}

// Get sends a plain forward-proxy request for url (absolute form) or path (origin form, as a health check).
func (c Client) Get(t testing.TB, target, host string) Result {
	t.Helper()
	r, err := c.TryGet(target, host)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TryGet is Get for goroutines other than the test's, which must not call t.Fatal.
func (c Client) TryGet(target, host string) (Result, error) {
	conn, err := c.Dial()
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = conn.Close() }() // by then the exchange is over (or failed): nothing is left to send
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", target, host, c.AuthHeader()); err != nil {
		return Result{}, fmt.Errorf("sending GET %s: %w", target, err)
	}
	return tryReadResult(bufio.NewReader(conn))
}

// Connect opens a CONNECT tunnel to hostport and, when it is established, fetches / over TLS through it.
func (c Client) Connect(t testing.TB, hostport string) Result {
	t.Helper()
	conn, err := c.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // by then the exchange is over (or the test failed): nothing is left to send
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hostport, hostport, c.AuthHeader()); err != nil {
		t.Fatalf("sending CONNECT %s: %v", hostport, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", hostport, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close() // only the status is wanted; closing the connection discards the rest
		return Result{Status: resp.StatusCode}
	}
	tconn := tls.Client(conn, &tls.Config{RootCAs: c.TLSRoots, ServerName: c.TLSHostname})
	if err := tconn.Handshake(); err != nil {
		t.Fatalf("TLS through CONNECT %s: %v", hostport, err)
	}
	host, _, _ := net.SplitHostPort(hostport)
	if _, err := fmt.Fprintf(tconn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		t.Fatalf("GET through CONNECT %s: %v", hostport, err)
	}
	r, err := tryReadResult(bufio.NewReader(tconn))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryReadResult(br *bufio.Reader) (Result, error) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return Result{}, fmt.Errorf("reading response: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read to the end already: closing frees nothing the test needs
	return Result{Status: resp.StatusCode, Body: string(body)}, nil
}

// Upstreams are the servers behind the proxy: plain HTTP, TLS for CONNECT, and one more on a port the proxy
// must not reach. Each answers "backend <host>", the host the request named.
type Upstreams struct {
	HTTP, TLS, Other *httptest.Server
}

// NewUpstreams starts the three servers on loopback, closed when the test ends.
func NewUpstreams(t testing.TB) Upstreams {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "backend %s", strings.Split(r.Host, ":")[0]) // a failed write shows as a wrong body
	})
	u := Upstreams{HTTP: httptest.NewServer(h), TLS: httptest.NewTLSServer(h), Other: httptest.NewServer(h)}
	t.Cleanup(func() { u.HTTP.Close(); u.TLS.Close(); u.Other.Close() })
	return u
}

// Port is the TCP port s listens on.
func Port(t testing.TB, s *httptest.Server) int {
	t.Helper()
	addr, ok := s.Listener.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("test server address %v is not TCP", s.Listener.Addr())
	}
	return addr.Port
}

// Client is a client of sq's proxy port from the address from, which trusts the TLS upstream.
func (u Upstreams) Client(sq *Squid, from string) Client {
	// The TLS server's own certificate, the one root its u.TLS.Client() trusts.
	roots := x509.NewCertPool()
	roots.AddCert(u.TLS.Certificate())
	return Client{
		Proxy: sq.Proxy, From: from,
		TLSRoots: roots,
		// httptest's certificate names example.com; the tunnel, not the name, is under test.
		TLSHostname: "example.com",
	}
}
