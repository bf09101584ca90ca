package testutil

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ProxyClient sends proxied GETs to a booted guest's Squid, from a client in a network namespace of the
// test's, to an upstream that answers "upstream " and the Host it was asked for.
type ProxyClient struct {
	Dial           func(ctx context.Context) (net.Conn, error)
	User, Password string
	TLS            *tls.Config // set when the proxy port speaks TLS
}

// DialFromNetns dials address from localIP inside the network namespace netns.
func DialFromNetns(netns, localIP, address string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var c net.Conn
		err := InNetns(netns, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
			c, err = d.DialContext(ctx, "tcp", address)
			return err
		})
		return c, err
	}
}

// Get sends one proxied GET for url, with the client's credentials if auth, and returns the status Squid
// answers with; a 200 must carry the upstream's answer. A refused connection is Squid between closing its
// port and opening it again, as it does on every reconfigure: the dial is tried again until it connects or
// ctx ends.
func (c ProxyClient) Get(ctx context.Context, t testing.TB, url string, auth bool) int {
	t.Helper()
	conn, err := c.Dial(ctx)
	if errors.Is(err, syscall.ECONNREFUSED) {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for errors.Is(err, syscall.ECONNREFUSED) && ctx.Err() == nil {
			<-tick.C
			conn, err = c.Dial(ctx)
		}
	}
	if err != nil {
		t.Fatalf("dialing the guest's Squid: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if c.TLS != nil {
		tc := tls.Client(conn, c.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatalf("TLS handshake with the guest's Squid: %v", err)
		}
		conn = tc
	}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", url, host)
	if auth {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(c.User+":"+c.Password)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading Squid's answer to %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && !strings.HasPrefix(string(body), "upstream "+host) {
		t.Errorf("200 for %s did not come from the upstream: %q", url, body)
	}
	return resp.StatusCode
}
