package proxyconf

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// decision is one request of the decision table and what must come of it: the status and the access log
// line's decision fields.
type decision struct {
	name       string
	from       string // 127.0.0.x; 127.0.0.1 when empty
	user, pass string
	cert       *tls.Certificate // the client certificate over a TLS listener
	connect    string           // CONNECT host:port; otherwise GET url
	url        string
	want       int
	// The access log line: ruleset ("-" for none), decision and reason ("-" for none).
	ruleSet, decision, reason string
}

// countingListener accepts on addr and counts the connections: a destination the proxy must never open.
func countingListener(t *testing.T, network, addr string) *atomic.Int64 {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	opened := &atomic.Int64{}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "a refused destination answered") // the count, not the answer, is the finding
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}}
	go func() { _ = srv.Serve(l) }() // ends when the test closes it
	t.Cleanup(func() { _ = srv.Close() })
	return opened
}

// policyHosts: the allowed names resolve to 127.0.0.1, where the test's upstreams are; refused.test to ::1,
// which the guards refuse even in tests (only 127.0.0.0/8 is lifted); own.test to 127.0.0.5, listed in the
// own-addresses file as the proxy's own; denied.test to 127.0.0.6, reachable but on the deny list.
func policyHosts(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "hosts")
	hosts := "127.0.0.1 allowed.test fallback.test other.test\n::1 refused.test\n127.0.0.5 own.test\n127.0.0.6 denied.test\n"
	if err := os.WriteFile(path, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSquidJudgesByRuleSets is the decision table of issue 39 on the real Squid: clients by range, by user and
// by client certificate, times destinations (a rule set's, the fallback's, nobody's, the deny list's, one
// resolving into a refused range, one of the proxy's own addresses, an IP literal of a refused range) and ports,
// times modes. Every request is checked for its status and for its access log line's rule set, decision and
// reason, and the refused destinations must never have been opened, in report mode least of all.
func TestSquidJudgesByRuleSets(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp, tp, op := squidtest.Port(t, b.HTTP), squidtest.Port(t, b.TLS), squidtest.Port(t, b.Other)
	// The refused destinations listen on the allowed ports, so that only the guards stand between them and
	// the proxy.
	refusedOpened := countingListener(t, "tcp6", fmt.Sprintf("[::1]:%d", hp))
	ownOpened := countingListener(t, "tcp4", fmt.Sprintf("127.0.0.5:%d", hp))
	deniedOpened := countingListener(t, "tcp4", fmt.Sprintf("127.0.0.6:%d", hp))
	get := func(host string) string { return fmt.Sprintf("http://%s:%d/", host, hp) }
	tun := func(host string) string { return fmt.Sprintf("%s:%d", host, tp) }
	const none = "-"

	// Rule sets by range: 127.0.0.2 enforced, 127.0.0.3 reported; 127.0.0.1 named by none.
	byRange := Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/29"},
		AllowedDestinations: []string{"fallback.test", "refused.test", "own.test", "denied.test"},
		AllowedPorts:        []int{hp, tp},
		DeniedDestinations:  []string{"denied.test"},
		RuleSets: []RuleSet{
			{Name: "enforced", Clients: RuleSetClients{SourceCIDRs: []string{"127.0.0.2/32"}}, Destinations: []string{"allowed.test", "refused.test", "own.test", "denied.test"}, Ports: []int{hp, tp}},
			{Name: "reported", Clients: RuleSetClients{SourceCIDRs: []string{"127.0.0.3/32"}}, Destinations: []string{"allowed.test", "refused.test", "own.test", "denied.test"}, Ports: []int{hp, tp}, Mode: RuleSetReport},
		},
	}
	const e, r = "127.0.0.2", "127.0.0.3"
	rangeTable := []decision{
		{name: "enforce: its destination", from: e, url: get("allowed.test"), want: 200, ruleSet: "enforced", decision: "allow", reason: none},
		{name: "enforce: its destination over CONNECT", from: e, connect: tun("allowed.test"), want: 200, ruleSet: "enforced", decision: "allow", reason: none},
		{name: "enforce: the fallback's destination", from: e, url: get("fallback.test"), want: 403, ruleSet: "enforced", decision: "deny", reason: ReasonDestinationNotAllowed},
		{name: "enforce: nobody's destination over CONNECT", from: e, connect: tun("other.test"), want: 403, ruleSet: "enforced", decision: "deny", reason: ReasonDestinationNotAllowed},
		{name: "enforce: a port outside its ports", from: e, connect: fmt.Sprintf("allowed.test:%d", op), want: 403, ruleSet: "enforced", decision: "deny", reason: ReasonPortNotAllowed},
		{name: "enforce: denied wins over its list", from: e, url: get("denied.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDeniedDestination},
		{name: "enforce: its name in a refused range", from: e, url: get("refused.test"), want: 403, ruleSet: "enforced", decision: "deny", reason: ReasonDestinationAddress},
		{name: "enforce: its name on an own address", from: e, url: get("own.test"), want: 403, ruleSet: "enforced", decision: "deny", reason: ReasonDestinationAddress},
		{name: "report: its destination", from: r, url: get("allowed.test"), want: 200, ruleSet: "reported", decision: "allow", reason: none},
		{name: "report: the fallback's destination is forwarded", from: r, url: get("fallback.test"), want: 200, ruleSet: "reported", decision: "would_deny", reason: ReasonDestinationNotAllowed},
		{name: "report: nobody's destination over CONNECT is forwarded", from: r, connect: tun("other.test"), want: 200, ruleSet: "reported", decision: "would_deny", reason: ReasonDestinationNotAllowed},
		{name: "report: a port outside its ports is forwarded", from: r, url: fmt.Sprintf("http://allowed.test:%d/", op), want: 200, ruleSet: "reported", decision: "would_deny", reason: ReasonPortNotAllowed},
		{name: "report: denied stays refused", from: r, url: get("denied.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDeniedDestination},
		{name: "report: its name in a refused range stays refused", from: r, url: get("refused.test"), want: 403, ruleSet: "reported", decision: "deny", reason: ReasonDestinationAddress},
		{name: "report: its name on an own address stays refused", from: r, url: get("own.test"), want: 403, ruleSet: "reported", decision: "deny", reason: ReasonDestinationAddress},
		{name: "report: a refused range's IP literal stays refused", from: r, url: fmt.Sprintf("http://[::1]:%d/", hp), want: 403, ruleSet: "reported", decision: "deny", reason: ReasonDestinationAddress},
		{name: "report: an own address's IP literal stays refused", from: r, connect: fmt.Sprintf("127.0.0.5:%d", hp), want: 403, ruleSet: "reported", decision: "deny", reason: ReasonDestinationAddress},
		{name: "report: the cache manager stays refused", from: r, url: fmt.Sprintf("http://allowed.test:%d/squid-internal-mgr/info", hp), want: 403, ruleSet: none, decision: "deny", reason: ReasonProtocolNotAllowed},
		{name: "fallback: its destination", url: get("fallback.test"), want: 200, ruleSet: none, decision: "allow", reason: none},
		{name: "fallback: a rule set's destination", url: get("allowed.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDestinationNotAllowed},
		{name: "fallback: a port outside allowed_ports", connect: fmt.Sprintf("fallback.test:%d", op), want: 403, ruleSet: none, decision: "deny", reason: ReasonPortNotAllowed},
		{name: "fallback: denied", url: get("denied.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDeniedDestination},
		{name: "fallback: its name in a refused range", url: get("refused.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDestinationAddress},
		{name: "client outside allowed_client_cidrs", from: "127.0.0.9", url: get("fallback.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonClientNotAllowed},
	}

	// Rule sets by user: alice is enforced, bob reported, carol named by none.
	byUser := Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/29"},
		AllowedDestinations: []string{"fallback.test"},
		AllowedPorts:        []int{hp, tp},
		Users: []BasicAuth{{Username: "alice", Password: "alice-password"}, {Username: "bob", Password: "bob-password"},
			{Username: "carol", Password: "carol-password"}},
		RuleSets: []RuleSet{
			{Name: "alice-enforced", Clients: RuleSetClients{Users: []string{"alice"}}, Destinations: []string{"allowed.test"}, Ports: []int{hp, tp}},
			{Name: "bob-reported", Clients: RuleSetClients{Users: []string{"bob"}}, Destinations: []string{"allowed.test"}, Ports: []int{hp, tp}, Mode: RuleSetReport},
		},
	}
	userTable := []decision{
		{name: "no credentials", url: get("allowed.test"), want: 407, ruleSet: none, decision: "deny", reason: ReasonAuthentication},
		{name: "wrong password", user: "alice", pass: "bob-password", url: get("allowed.test"), want: 407, ruleSet: none, decision: "deny", reason: ReasonAuthentication},
		{name: "enforce: her destination", user: "alice", pass: "alice-password", url: get("allowed.test"), want: 200, ruleSet: "alice-enforced", decision: "allow", reason: none},
		{name: "enforce: the fallback's destination", user: "alice", pass: "alice-password", connect: tun("fallback.test"), want: 403, ruleSet: "alice-enforced", decision: "deny", reason: ReasonDestinationNotAllowed},
		{name: "report: the fallback's destination", user: "bob", pass: "bob-password", connect: tun("fallback.test"), want: 200, ruleSet: "bob-reported", decision: "would_deny", reason: ReasonDestinationNotAllowed},
		{name: "report: a refused range", user: "bob", pass: "bob-password", url: get("refused.test"), want: 403, ruleSet: "bob-reported", decision: "deny", reason: ReasonDestinationAddress},
		{name: "fallback: carol", user: "carol", pass: "carol-password", url: get("fallback.test"), want: 200, ruleSet: none, decision: "allow", reason: none},
		{name: "fallback: carol, a rule set's destination", user: "carol", pass: "carol-password", url: get("allowed.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDestinationNotAllowed},
	}

	// Rule sets by client certificate: "payments" enforced, "builds" reported, any other certificate the CA
	// signed falls back; a revoked one, one of another CA and none are refused in the handshake.
	ca, other := newClientCA(t, "egress test clients"), newClientCA(t, "someone else's clients")
	payments, _ := clientCert(t, ca, "payments")
	builds, _ := clientCert(t, ca, "builds")
	plain, _ := clientCert(t, ca, "someone")
	revoked, revokedSerial := clientCert(t, ca, "payments")
	stranger, _ := clientCert(t, other, "payments")
	serverCert, serverKey := squidServerPair(t)
	byCert := Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/29"},
		AllowedDestinations: []string{"fallback.test"},
		AllowedPorts:        []int{hp, tp},
		TLS: &TLSSettings{CertificatePEM: serverCert, PrivateKeyPEM: serverKey, ClientCAPEM: ca.pem,
			ClientCRLPEM: crlPEM(t, ca.cert, ca.key, revokedSerial)},
		RuleSets: []RuleSet{
			{Name: "payments", Clients: RuleSetClients{CertificateSubjects: []string{"payments"}}, Destinations: []string{"allowed.test"}, Ports: []int{hp, tp}},
			{Name: "builds", Clients: RuleSetClients{CertificateSubjects: []string{"builds"}}, Destinations: []string{"allowed.test"}, Ports: []int{hp, tp}, Mode: RuleSetReport},
		},
	}
	certTable := []decision{
		{name: "enforce: its destination", cert: payments, url: get("allowed.test"), want: 200, ruleSet: "payments", decision: "allow", reason: none},
		{name: "enforce: the fallback's destination", cert: payments, connect: tun("fallback.test"), want: 403, ruleSet: "payments", decision: "deny", reason: ReasonDestinationNotAllowed},
		{name: "report: the fallback's destination", cert: builds, url: get("fallback.test"), want: 200, ruleSet: "builds", decision: "would_deny", reason: ReasonDestinationNotAllowed},
		{name: "report: a refused range", cert: builds, url: get("refused.test"), want: 403, ruleSet: "builds", decision: "deny", reason: ReasonDestinationAddress},
		{name: "fallback: another subject", cert: plain, url: get("fallback.test"), want: 200, ruleSet: none, decision: "allow", reason: none},
		{name: "fallback: another subject, a rule set's destination", cert: plain, url: get("allowed.test"), want: 403, ruleSet: none, decision: "deny", reason: ReasonDestinationNotAllowed},
	}
	handshakeRefused := map[string]*tls.Certificate{"revoked": revoked, "another CA's": stranger, "none": nil}

	for name, tc := range map[string]struct {
		s     Settings
		table []decision
	}{"by range": {byRange, rangeTable}, "by user": {byUser, userTable}, "by certificate": {byCert, certTable}} {
		// In both log formats: the JSON line must carry the same decisions (checkDecisionLog reads either).
		for _, format := range []LogFormat{LogFormatText, LogFormatJSON} {
			s := tc.s
			s.LogFormat = format
			runDecisionTable(t, name+" "+string(format), b, s, tc.table, plain, handshakeRefused)
		}
	}
	t.Cleanup(func() {
		for what, n := range map[string]*atomic.Int64{"the refused range": refusedOpened, "the own address": ownOpened, "the denied destination": deniedOpened} {
			if n.Load() != 0 {
				t.Errorf("the proxy opened %d connections to %s", n.Load(), what)
			}
		}
	})
}

// runDecisionTable runs one proxy of TestSquidJudgesByRuleSets on s, sends it table's requests one at a time,
// and checks each answer and log line; over TLS, plain's certificate must complete a handshake and each of
// refused's must not.
func runDecisionTable(t *testing.T, name string, b squidtest.Upstreams, s Settings, table []decision, plain *tls.Certificate, refused map[string]*tls.Certificate) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		dir := squidtest.Dir(t)
		opts := testOptions(t, dir, nil)
		opts.HostsFile = policyHosts(t, dir)
		opts.OwnAddressesFile = filepath.Join(dir, "own-addresses")
		if err := os.WriteFile(opts.OwnAddressesFile, []byte("127.0.0.5\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		sq := startSquidWith(t, s, opts, dir)
		for i, d := range table {
			got := sendDecision(t, b, sq, s, d)
			if got != d.want {
				t.Errorf("%s: status %d, want %d", d.name, got, d.want)
			}
			// One request at a time in the log, so that its i-th line is the i-th request's: a tunnel's
			// line comes when Squid sees it closed, which may be after the next request.
			waitForLogLines(t, sq, i+1)
		}
		checkDecisionLog(t, sq, table)
		if s.TLS != nil {
			// The control: a certificate the CA signed completes the same exchange.
			if err := tlsProxyHandshake(sq, s, plain); err != nil {
				t.Errorf("a client with a valid certificate: %v", err)
			}
			for name, cert := range refused {
				if err := tlsProxyHandshake(sq, s, cert); err == nil {
					t.Errorf("a client with %s certificate completed the handshake", name)
				}
			}
		}
	})
}

// sendDecision sends d and returns the status the proxy (or, through a tunnel, the upstream) answered.
func sendDecision(t *testing.T, b squidtest.Upstreams, sq *squidtest.Squid, s Settings, d decision) int {
	t.Helper()
	from := d.from
	if from == "" {
		from = "127.0.0.1"
	}
	if s.TLS != nil {
		return tlsProxyRequest(t, sq, s, d)
	}
	c := b.Client(sq, from)
	c.User, c.Pass = d.user, d.pass
	if d.connect != "" {
		return c.Connect(t, d.connect).Status
	}
	return c.Get(t, d.url, strings.Split(strings.TrimPrefix(d.url, "http://"), "/")[0]).Status
}

// tlsProxyConn is a TLS connection to the proxy port presenting cert (none when nil).
func tlsProxyConn(sq *squidtest.Squid, s Settings, cert *tls.Certificate) (*tls.Conn, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(s.TLS.CertificatePEM))
	cfg := &tls.Config{RootCAs: roots, ServerName: "proxy.test", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", sq.Proxy, cfg)
	if err != nil {
		return nil, err
	}
	return conn, conn.SetDeadline(time.Now().Add(15 * time.Second))
}

// tlsProxyHandshake completes a handshake and one exchange with the proxy: under TLS 1.3 the server's
// refusal of a client certificate arrives after the client's side of the handshake, on the first read.
func tlsProxyHandshake(sq *squidtest.Squid, s Settings, cert *tls.Certificate) error {
	conn, err := tlsProxyConn(sq, s, cert)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // the exchange is over either way
	if _, err := fmt.Fprintf(conn, "GET http://fallback.test/ HTTP/1.1\r\nHost: fallback.test\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	_, err = http.ReadResponse(bufio.NewReader(conn), nil)
	return err
}

// tlsProxyRequest sends d to a TLS proxy port with d's certificate; a CONNECT's status is the proxy's.
func tlsProxyRequest(t *testing.T, sq *squidtest.Squid, s Settings, d decision) int {
	t.Helper()
	conn, err := tlsProxyConn(sq, s, d.cert)
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	defer func() { _ = conn.Close() }() // the exchange is over either way
	req := &http.Request{Method: http.MethodGet}
	if d.connect != "" {
		req.Method = http.MethodConnect
		_, err = fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", d.connect, d.connect)
	} else {
		host := strings.Split(strings.TrimPrefix(d.url, "http://"), "/")[0]
		_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", d.url, host)
	}
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	_ = resp.Body.Close() // the status is what is wanted
	return resp.StatusCode
}

// logFields are the key=value fields of an access log line.
func logFields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// decisionFields are the fields of a text line (logFields) or of a JSON line, the JSON's named as the text's.
func decisionFields(t *testing.T, line string) map[string]string {
	t.Helper()
	if !strings.HasPrefix(line, "{") {
		return logFields(line)
	}
	f, err := decodeJSONLogLine(line)
	if err != nil {
		t.Errorf("%v\n%s", err, line)
		return map[string]string{}
	}
	f["ruleset"] = f["rule_set"]
	return f
}

// waitForLogLines waits until the access log has n lines, and returns its lines.
func waitForLogLines(t *testing.T, sq *squidtest.Squid, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var lines []string
		for _, l := range strings.Split(sq.File("access.log"), "\n") {
			// Connections that sent no request (squidtest.Start's probes of the ports) are no decisions.
			if l != "" && !strings.Contains(l, " method=- ") && !strings.Contains(l, `"method":"-"`) {
				lines = append(lines, l)
			}
		}
		if len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
	}
}

// clientCert is a client certificate for cn signed by ca, and its serial number.
func clientCert(t *testing.T, ca clientCA, cn string) (*tls.Certificate, *big.Int) {
	t.Helper()
	key, cert, _ := testutil.SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca.cert, ca.key)
	return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, cert.SerialNumber
}

// squidServerPair is the proxy's own certificate, for proxy.test, and its key.
func squidServerPair(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	return testutil.SelfSignedPEM(t, "proxy.test")
}

// checkDecisionLog holds the i-th line to the i-th request: its status and its rule set,
// decision and reason.
func checkDecisionLog(t *testing.T, sq *squidtest.Squid, table []decision) {
	t.Helper()
	lines := waitForLogLines(t, sq, len(table))
	if len(lines) != len(table) {
		t.Fatalf("the access log has %d lines for %d requests:\n%s", len(lines), len(table), strings.Join(lines, "\n"))
	}
	for i, d := range table {
		f := decisionFields(t, lines[i])
		want := map[string]string{"status": fmt.Sprint(d.want), "ruleset": d.ruleSet, "decision": d.decision, "reason": d.reason}
		if d.connect != "" && d.want == 200 {
			delete(want, "status") // a tunnel's line carries the upstream's status, not the CONNECT's
		}
		for k, v := range want {
			if f[k] != v {
				t.Errorf("%s: logged %s=%s, want %s=%s\n%s", d.name, k, f[k], k, v, lines[i])
			}
		}
	}
}

// TestReportModeKeepsTheConnectionLimit: a client of a report rule set, whose every destination is forwarded,
// is still held to max_connections_per_client: beyond it, refused and logged as a denial for that reason.
func TestReportModeKeepsTheConnectionLimit(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp := squidtest.Port(t, b.HTTP)
	sq := startSquid(t, Settings{
		AllowedClientCIDRs:      []string{"127.0.0.0/8"},
		MaxConnectionsPerClient: 1,
		RuleSets:                []RuleSet{{Name: "watched", Clients: RuleSetClients{SourceCIDRs: []string{"127.0.0.4/32"}}, Ports: []int{hp}, Mode: RuleSetReport}},
	}, testHosts)
	target := fmt.Sprintf("http://allowed.test:%d/", hp)
	// Not 127.0.0.1, whose probes of the ports at start Squid may still count as open.
	const from = "127.0.0.4"
	// One connection held open after a forwarded request.
	conn, err := squidtest.Client{Proxy: sq.Proxy, From: from}.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // the test is over
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: allowed.test\r\n\r\n", target); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // the status is what counts; the connection stays open
	if resp.StatusCode != 200 {
		t.Fatalf("the first request: got %d, want 200 (would_deny)", resp.StatusCode)
	}
	if got := (squidtest.Client{Proxy: sq.Proxy, From: from}).Get(t, target, "allowed.test"); got.Status != 403 {
		t.Errorf("a connection beyond the limit: got %d, want 403", got.Status)
	}
	lines := waitForLogLines(t, sq, 2)
	if len(lines) < 2 {
		t.Fatalf("the access log lacks the two requests:\n%s", strings.Join(lines, "\n"))
	}
	for i, want := range []map[string]string{
		{"status": "200", "ruleset": "watched", "decision": "would_deny", "reason": ReasonDestinationNotAllowed},
		{"status": "403", "ruleset": "-", "decision": "deny", "reason": ReasonClientConnections},
	} {
		f := logFields(lines[i])
		for k, v := range want {
			if f[k] != v {
				t.Errorf("request %d: logged %s=%s, want %s=%s\n%s", i+1, k, f[k], k, v, lines[i])
			}
		}
	}
}
