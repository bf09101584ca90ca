package proxyconf

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// jsonRequest is one request of TestJSONAccessLogOnSquid: sent byte for byte as raw, and what its JSON line
// must say once decoded (numbers as Squid printed them, strings percent-decoded).
type jsonRequest struct {
	name string
	raw  string
	cert *tls.Certificate // the client certificate, over a TLS listener
	// status is the proxy's answer; 0 sends raw and closes without waiting for one (an aborted request).
	status int
	want   map[string]string
}

// TestJSONAccessLogOnSquid holds the JSON line to what the real Squid writes for hostile input: usernames
// with quotes, backslashes, control and non-UTF-8 bytes in Proxy-Authorization, hosts with quotes,
// backslashes, percent signs, braces and non-ASCII bytes, a method Squid forwards, requests Squid cannot
// parse, an aborted request, a client certificate whose subject holds quotes and backslashes. Every line
// must be valid JSON with exactly JSONLogFields in order, the number fields JSON numbers, and each field
// what was sent; no line may carry the URL's path or query.
func TestJSONAccessLogOnSquid(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp, tp := squidtest.Port(t, b.HTTP), squidtest.Port(t, b.TLS)
	basic := func(user, pass string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n"
	}
	alice := basic("alice", "alice-password")
	get := func(target, auth string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: allowed.test\r\n%sConnection: close\r\n\r\n", target, auth)
	}
	connect := func(hostport, auth string) string {
		return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hostport, hostport, auth)
	}
	allowedGet := fmt.Sprintf("http://allowed.test:%d/secret-path?token=secret-query", hp)
	port := fmt.Sprint(hp)

	table := []jsonRequest{
		{name: "allowed GET", raw: get(allowedGet, alice), status: 200, want: map[string]string{
			"client": "127.0.0.1", "user": "alice", "cert_subject": "-", "rule_set": "-", "method": "GET", "host": "allowed.test",
			"port": port, "decision": "allow", "reason": "-", "status": "200", "squid_status": "TCP_MISS", "server": "127.0.0.1"}},
		{name: "allowed CONNECT", raw: connect(fmt.Sprintf("allowed.test:%d", tp), alice), status: 200, want: map[string]string{
			"user": "alice", "method": "CONNECT", "host": "allowed.test", "port": fmt.Sprint(tp), "decision": "allow",
			"reason": "-", "status": "200", "squid_status": "TCP_TUNNEL", "server": "127.0.0.1"}},
		{name: "refused CONNECT: no server contacted", raw: connect("allowed.test:25", alice), status: 403, want: map[string]string{
			"method": "CONNECT", "host": "allowed.test", "port": "25", "decision": "deny", "reason": ReasonPortNotAllowed,
			"status": "403", "squid_status": "TCP_DENIED", "server": "-"}},
		{name: "no credentials", raw: get(allowedGet, ""), status: 407, want: map[string]string{
			"user": "-", "decision": "deny", "reason": ReasonAuthentication, "status": "407", "server": "-"}},
		{name: "a method Squid forwards", raw: fmt.Sprintf("FOO~BAR http://other.test:%d/ HTTP/1.1\r\nHost: other.test\r\n%s\r\n", hp, alice),
			status: 403, want: map[string]string{"method": "FOO~BAR", "host": "other.test", "decision": "deny", "reason": ReasonDestinationNotAllowed}},
		{name: "a request Squid cannot parse", raw: "garbage\r\n\r\n", status: 400, want: map[string]string{
			"user": "-", "method": "garbage", "host": "-", "port": "-", "decision": "-", "reason": "-", "status": "400",
			"squid_status": "NONE_NONE", "server": "-"}},
		{name: "a control byte in the host", raw: connect("ctl\x01.test:443", alice), status: 400, want: map[string]string{
			"user": "-", "method": "CONNECT", "host": "-", "port": "-", "decision": "-", "reason": "-", "status": "400"}},
		{name: "an aborted request", raw: "GET http://allowed.test", want: map[string]string{
			"method": "-", "host": "-", "port": "-", "decision": "-", "status": "0", "squid_status": "NONE_NONE", "server": "-"}},
	}
	// Each name as sent, and as logged: Squid keeps a name it cannot use (a wrong password) but not one with a
	// line break, and Basic ends the name at the first colon.
	for sent, logged := range map[string]string{`quo"te`: `quo"te`, `back\slash`: `back\slash`, "ctl\x01\x1f\x7f": "ctl\x01\x1f\x7f",
		"tab\tonly": "tab\tonly", "new\nline\rend": "-", "bad\xff\xfeutf8": "bad\xff\xfeutf8", "caf\xc3\xa9": "caf\xc3\xa9",
		"pct%22": "pct%22", `brace{}"\`: `brace{}"\`, `json","decision","allow`: `json","decision","allow`,
		`json":"allow`: `json"`} {
		table = append(table, jsonRequest{name: fmt.Sprintf("user %q", sent), raw: get(allowedGet, basic(sent, "wrong")), status: 407,
			want: map[string]string{"user": logged, "decision": "deny", "reason": ReasonAuthentication, "status": "407"}})
	}
	for sent, logged := range map[string]string{`quo"te.test`: `quo"te.test`, `back\slash.test`: `back\slash.test`,
		"pct%22.test": "pct%22.test", "brace{x}.test": "brace{x}.test", "caf\xc3\xa9.test": "caf\xc3\xa9.test",
		"UPPER.test": "upper.test", "[::1]": "[::1]"} {
		table = append(table, jsonRequest{name: fmt.Sprintf("host %q", sent), raw: connect(sent+":443", alice), status: 403,
			want: map[string]string{"user": "alice", "host": logged, "port": "443", "decision": "deny", "reason": ReasonPortNotAllowed}})
	}

	plain := Settings{AllowedClientCIDRs: []string{"127.0.0.0/8"}, AllowedDestinations: []string{"allowed.test"},
		AllowedPorts: []int{hp, tp}, Users: []BasicAuth{{Username: "alice", Password: "alice-password"}}, LogFormat: LogFormatJSON}

	ca := newClientCA(t, "egress test clients")
	const subject = `we"ird\subject`
	weird, _ := clientCert(t, ca, subject)
	serverCert, serverKey := squidServerPair(t)
	withCerts := Settings{AllowedClientCIDRs: []string{"127.0.0.0/8"}, AllowedDestinations: []string{"allowed.test"},
		AllowedPorts: []int{hp, tp}, LogFormat: LogFormatJSON,
		TLS: &TLSSettings{CertificatePEM: serverCert, PrivateKeyPEM: serverKey, ClientCAPEM: ca.pem}}
	certTable := []jsonRequest{
		{name: "client certificate", cert: weird, raw: get(allowedGet, ""), status: 200, want: map[string]string{
			"user": "-", "cert_subject": "/CN=" + subject, "decision": "allow", "status": "200"}},
		// A proxy without auth reads no credentials, so a name sent anyway is not logged.
		{name: "credentials a proxy without auth ignores", cert: weird, raw: get(allowedGet, basic("mallory", "password")), status: 200,
			want: map[string]string{"user": "-", "cert_subject": "/CN=" + subject, "decision": "allow"}},
	}

	for name, tc := range map[string]struct {
		s     Settings
		table []jsonRequest
	}{"plain listener": {plain, table}, "client certificates": {withCerts, certTable}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sq := startSquid(t, tc.s, []string{"allowed.test", "other.test"})
			for i, r := range tc.table {
				sendRaw(t, sq, tc.s, r)
				lines := jsonLogLines(t, sq, i+1)
				if len(lines) <= i {
					t.Fatalf("%s: no access log line:\n%s", r.name, sq.File("access.log"))
				}
				line := lines[i]
				got, err := decodeJSONLogLine(line)
				if err != nil {
					t.Errorf("%s: %v\n%s", r.name, err, line)
					continue
				}
				for k, v := range r.want {
					if got[k] != v {
						t.Errorf("%s: %s is %q, want %q\n%s", r.name, k, got[k], v, line)
					}
				}
				checkServerTimers(t, r.name, got, line)
				if strings.Contains(line, "secret") {
					t.Errorf("%s: the line carries the URL's path or query:\n%s", r.name, line)
				}
			}
		})
	}
}

// checkServerTimers: a line whose request reached a server has Squid's total server time, and its response
// time too unless it was a tunnel the server sent nothing through (the test's tunnels: the client sends
// nothing), the total no less than the response time (their difference is the connect time the metrics
// derive); one that reached none has neither.
func checkServerTimers(t *testing.T, name string, got map[string]string, line string) {
	t.Helper()
	total, response := got["server_total_ms"], got["server_response_ms"]
	if got["server"] == "-" {
		if total != "-" || response != "-" {
			t.Errorf("%s: no server contacted, but server_total_ms %q and server_response_ms %q\n%s", name, total, response, line)
		}
		return
	}
	if got["method"] == "CONNECT" && response == "-" {
		response = "0"
	}
	tt, errT := strconv.Atoi(total)
	pt, errP := strconv.Atoi(response)
	if errT != nil || errP != nil || tt < pt || pt < 0 {
		t.Errorf("%s: server_total_ms %q and server_response_ms %q: want two counts of milliseconds, the total no less\n%s", name, total, response, line)
	}
}

// sendRaw sends r.raw to the proxy, over TLS with r.cert when s has TLS, and reads the proxy's answer.
func sendRaw(t *testing.T, sq *squidtest.Squid, s Settings, r jsonRequest) {
	t.Helper()
	var conn io.ReadWriteCloser
	if s.TLS != nil {
		c, err := tlsProxyConn(sq, s, r.cert)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		conn = c
	} else {
		c, err := squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.1"}.Dial()
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		conn = c
	}
	defer func() { _ = conn.Close() }() // the exchange is over either way; closing ends a tunnel, and logs it
	if _, err := io.WriteString(conn, r.raw); err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	if r.status == 0 {
		return
	}
	method := strings.SplitN(r.raw, " ", 2)[0]
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	// Read to the end, or Squid logs the exchange as aborted.
	if _, err := io.Copy(io.Discard, resp.Body); err != nil && method != http.MethodConnect {
		t.Errorf("%s: %v", r.name, err)
	}
	_ = resp.Body.Close() // read already
	if resp.StatusCode != r.status {
		t.Errorf("%s: status %d, want %d", r.name, resp.StatusCode, r.status)
	}
}

// jsonLogLines waits until the access log has n lines of requests, and returns them. The connections that
// sent nothing (squidtest.Start's probes of the ports) log lines too, which are no requests.
func jsonLogLines(t *testing.T, sq *squidtest.Squid, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var lines []string
		for _, l := range strings.Split(sq.File("access.log"), "\n") {
			probe := strings.Contains(l, `"method":"-"`) && strings.Contains(l, `"bytes_from_client":0,`)
			if l != "" && !probe {
				lines = append(lines, l)
			}
		}
		if len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
	}
}

// decodeJSONLogLine checks that line is one JSON object with exactly JSONLogFields, in order, each a JSON
// number or a percent-encoded string as jsonLogFields says, and returns the fields: numbers as written,
// strings decoded.
func decodeJSONLogLine(line string) (map[string]string, error) {
	if !json.Valid([]byte(line)) {
		return nil, fmt.Errorf("not valid JSON")
	}
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object (%v): %w", tok, err)
	}
	out := map[string]string{}
	for _, f := range jsonLogFields {
		key, err := d.Token()
		if err != nil {
			return nil, err
		}
		if key != f.name {
			return nil, fmt.Errorf("field %v where %q belongs", key, f.name)
		}
		v, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case json.Number:
			if !f.number {
				return nil, fmt.Errorf("%s is the number %s, want a string", f.name, v)
			}
			out[f.name] = v.String()
		case string:
			if f.number {
				return nil, fmt.Errorf("%s is the string %q, want a number", f.name, v)
			}
			if out[f.name], err = url.PathUnescape(v); err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
		default:
			return nil, fmt.Errorf("%s is %v, neither a number nor a string", f.name, v)
		}
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('}') || d.More() {
		return nil, fmt.Errorf("more than %d fields", len(jsonLogFields))
	}
	return out, nil
}
