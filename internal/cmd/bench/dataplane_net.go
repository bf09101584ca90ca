package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// originBody is what the benchmark's origin answers: a small object, so that the figures are the proxies'
// work per request and per tunnel, not the copying of bytes.
var originBody = []byte(strings.Repeat("egress data-plane benchmark\n", 18)) // 504 bytes

// runOrigin serves originBody on every address given, plain HTTP, until it is stopped (SIGTERM). The
// benchmark's tunnels reach it on port 443 and speak plain HTTP through the tunnel: the client then spends no
// CPU on a TLS handshake with the origin, which the proxies never see inside a tunnel anyway. With -dns it
// also answers DNS there (see answerNXDOMAIN).
func runOrigin(ctx context.Context, args []string, _ io.Reader, _ io.Writer) error {
	fs := newFlagSet("origin")
	dns := fs.String("dns", "", "also answer DNS queries on this UDP address, each with NXDOMAIN")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: origin takes the addresses to listen on", errUsage)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(originBody)))
		_, _ = w.Write(originBody) // a client that went away is no error of the origin's
	})
	errs := make(chan error, fs.NArg()+1)
	var servers []*http.Server
	for _, addr := range fs.Args() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
		servers = append(servers, srv)
		go func() { errs <- srv.Serve(l) }()
	}
	if *dns != "" {
		pc, err := net.ListenPacket("udp", *dns)
		if err != nil {
			return err
		}
		defer func() { _ = pc.Close() }() // stopping
		go func() { errs <- answerNXDOMAIN(pc) }()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		for _, srv := range servers {
			_ = srv.Close() // stopping: what a close says changes nothing
		}
		return nil
	}
}

// answerNXDOMAIN answers every DNS query on pc with "no such name", at once. The proxies find the origin in
// the run's hosts file; what they ask a resolver besides (Squid looks up the client's address, PTR, for every
// new client) gets the quick negative answer a real resolver gives for a private address, instead of the
// retries and timeouts of a resolver that cannot be reached, which would be measured as the proxy's.
func answerNXDOMAIN(pc net.PacketConn) error {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if answer, ok := nxdomain(buf[:n]); ok {
			_, _ = pc.WriteTo(answer, from) // a lost answer is a retry, as over any network
		}
	}
}

// nxdomain is the answer to the DNS query q (RFC 1035 section 4.1): its id and question, no record,
// recursion available, RCODE 3 (name error). ok is false for anything but a query of one question.
func nxdomain(q []byte) (answer []byte, ok bool) {
	const header = 12
	if len(q) < header || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil, false
	}
	i := header
	for {
		if i >= len(q) {
			return nil, false
		}
		l := int(q[i])
		if l == 0 {
			i++
			break
		}
		if l&0xc0 != 0 { // a pointer has no place in a query's only name
			return nil, false
		}
		i += 1 + l
	}
	i += 4 // QTYPE and QCLASS
	if i > len(q) {
		return nil, false
	}
	answer = slices.Clone(q[:i])
	answer[2] = 0x80 | q[2]&0x79 // QR; the query's opcode and RD
	answer[3] = 0x80 | 3         // RA; NXDOMAIN
	clear(answer[6:header])      // no answer, authority or additional records (the query's EDNS record is not echoed)
	return answer, true
}

// runWait waits until every address given accepts a TCP connection, or -timeout passes: the script starts a
// server in the background and goes on once it listens.
func runWait(ctx context.Context, args []string, _ io.Reader, _ io.Writer) error {
	fs := newFlagSet("wait")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for _, addr := range fs.Args() {
		for {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				_ = c.Close() // only that it accepted matters
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s does not accept connections after %s: %w", addr, *timeout, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// tunnelClient opens CONNECT tunnels through a proxy, or, with no proxy, connections straight to the target
// (the floor the tunnels are compared with), and passes one HTTP exchange through each.
type tunnelClient struct {
	proxy   string      // host:port; "" goes straight to target
	tls     *tls.Config // nil: plain TCP to the proxy
	auth    string      // a Proxy-Authorization value, or ""
	target  string      // host:port
	sources []netip.Addr
	next    atomic.Uint64
}

// dial opens one tunnel (or direct connection), from the next source address in turn.
func (c *tunnelClient) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if len(c.sources) > 0 {
		src := c.sources[c.next.Add(1)%uint64(len(c.sources))]
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	if c.proxy == "" {
		conn, err := d.DialContext(ctx, "tcp", c.target)
		if err != nil {
			return nil, nil, err
		}
		return conn, bufio.NewReader(conn), nil
	}
	conn, err := d.DialContext(ctx, "tcp", c.proxy)
	if err != nil {
		return nil, nil, err
	}
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close() // the handshake's error is the one to report
			return nil, nil, fmt.Errorf("TLS to the proxy: %w", err)
		}
		conn = tc
	}
	req := "CONNECT " + c.target + " HTTP/1.1\r\nHost: " + c.target + "\r\n"
	if c.auth != "" {
		req += "Proxy-Authorization: " + c.auth + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("reading the answer to CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("CONNECT %s: %s", c.target, resp.Status)
	}
	return conn, br, nil
}

// exchange passes one request through an open tunnel and reads the origin's whole answer.
func (c *tunnelClient) exchange(conn net.Conn, br *bufio.Reader, closing bool) error {
	req := "GET / HTTP/1.1\r\nHost: " + c.target + "\r\n"
	if closing {
		req += "Connection: close\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("reading the origin's answer through the tunnel: %w", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close() // read to the end already
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || n != int64(len(originBody)) {
		return fmt.Errorf("the origin answered %s with %d bytes through the tunnel", resp.Status, n)
	}
	return nil
}

// once opens a tunnel, passes one exchange through it and closes it: what one short-lived HTTPS connection of
// a workload costs the proxy.
func (c *tunnelClient) once(ctx context.Context) error {
	conn, br, err := c.dial(ctx)
	if err != nil {
		return err
	}
	err = c.exchange(conn, br, true)
	_ = conn.Close() // the exchange decided
	return err
}

// tunnelFlags are the flags that say how to reach the target, shared by tunnels and hold.
func tunnelFlags(fs *flag.FlagSet) func() (*tunnelClient, error) {
	proxy := fs.String("proxy", "", "the proxy, host:port (none: straight to the target)")
	proxyTLS := fs.String("proxy-ca", "", "speak TLS to the proxy, trusting this CA file")
	proxyName := fs.String("proxy-name", "", "the name the proxy's certificate carries (default: the -proxy host)")
	authFile := fs.String("auth-file", "", "a file holding the Proxy-Authorization value (may be empty)")
	target := fs.String("target", "", "host:port to open tunnels to")
	sources := fs.String("sources", "", "local addresses to open connections from in turn, comma-separated")
	return func() (*tunnelClient, error) {
		if *target == "" {
			return nil, fmt.Errorf("%w: -target is required", errUsage)
		}
		c := &tunnelClient{proxy: *proxy, target: *target}
		if *proxyTLS != "" {
			pem, err := os.ReadFile(*proxyTLS)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s holds no certificate", *proxyTLS)
			}
			host, _, err := net.SplitHostPort(*proxy)
			if err != nil {
				return nil, fmt.Errorf("-proxy: %w", err)
			}
			if *proxyName != "" {
				host = *proxyName
			}
			// No session cache: every tunnel makes a full handshake, the proxy's cost for a client it has not
			// seen, and the worst case of one that does not resume.
			c.tls = &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}
		}
		if *authFile != "" {
			b, err := os.ReadFile(*authFile)
			if err != nil {
				return nil, err
			}
			c.auth = strings.TrimSpace(string(b))
		}
		for _, s := range strings.Split(*sources, ",") {
			if s == "" {
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("-sources: %w", err)
			}
			c.sources = append(c.sources, a)
		}
		return c, nil
	}
}

// runTunnels opens tunnels one after another on -c connections at once for -duration, each with one exchange
// through it, and prints how many it completed, in how long, and the p50 and p99 of their times (from the
// dial to the last byte of the answer). With -rate it opens that many a second instead of as many as it can.
// It stops at the first error: a proxy that refuses or fails is not measured, it is reported.
//
// Neither wrk nor hey can do this: both keep their connections open across requests, and with an https://
// target they would make a TLS handshake with the origin in every tunnel, so the figure would be the
// client's handshakes, not the proxy's tunnels.
func runTunnels(ctx context.Context, args []string, _ io.Reader, stdout io.Writer) error {
	fs := newFlagSet("tunnels")
	client := tunnelFlags(fs)
	conns := fs.Int("c", 32, "connections at once")
	duration := fs.Duration("duration", 10*time.Second, "how long")
	rate := fs.Float64("rate", 0, "tunnels a second (0: as many as the proxy takes)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	if *conns <= 0 || *duration <= 0 || *rate < 0 {
		return fmt.Errorf("%w: -c and -duration must be positive", errUsage)
	}
	res, err := c.run(ctx, *conns, *duration, *rate)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "tunnels=%d seconds=%.3f p50_ms=%.3f p99_ms=%.3f\n", len(res.times), res.elapsed.Seconds(),
		ms(percentile(res.times, 50)), ms(percentile(res.times, 99)))
	return err
}

type tunnelRun struct {
	times   []time.Duration
	elapsed time.Duration
}

func (c *tunnelClient) run(ctx context.Context, conns int, duration time.Duration, rate float64) (tunnelRun, error) {
	start := time.Now()
	// The run ends at the deadline: tunnels still open then are cut and not counted.
	deadline := start.Add(duration)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// With a rate, a ticker hands out turns; a turn not taken at once is dropped, so a proxy slower than the
	// rate shows as fewer tunnels, not as a queue of late ones.
	var turns <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		turns = t.C
	}
	var (
		mu       sync.Mutex
		times    []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); times = append(times, mine...); mu.Unlock() }()
			for {
				if turns != nil {
					select {
					case <-turns:
					case <-ctx.Done():
						return
					}
				}
				t0 := time.Now()
				err := c.once(ctx)
				// The deadline, or another's error: this one does not count. A dial cut by the deadline may
				// return before the context says it ended.
				if ctx.Err() != nil || !time.Now().Before(deadline) {
					return
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					cancel()
					return
				}
				mine = append(mine, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return tunnelRun{}, firstErr
	}
	return tunnelRun{times: times, elapsed: time.Since(start)}, nil
}

// runHold opens -n tunnels and keeps them open, each with one exchange passed through it, then prints the
// resident memory of process -pid and its descendants (the proxy, its workers and helpers) before and with
// them open, in KiB, and closes them. The proxy's client limits count per client address: -sources spreads
// the tunnels over several.
func runHold(ctx context.Context, args []string, _ io.Reader, stdout io.Writer) error {
	fs := newFlagSet("hold")
	client := tunnelFlags(fs)
	n := fs.Int("n", 1000, "tunnels to hold open")
	pid := fs.Int("pid", 0, "the proxy's process")
	conns := fs.Int("c", 50, "tunnels opened at once")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	if *n <= 0 || *pid <= 0 || *conns <= 0 {
		return fmt.Errorf("%w: hold takes -n, -pid and -c", errUsage)
	}
	before, err := treeRSS(*pid)
	if err != nil {
		return err
	}
	fdsBefore, err := openFiles(*pid)
	if err != nil {
		return err
	}
	open := make([]net.Conn, 0, *n)
	closeAll := func() {
		for _, conn := range open {
			_ = conn.Close() // done with it
		}
		open = nil
	}
	defer closeAll()
	var mu sync.Mutex
	var firstErr error
	todo := make(chan struct{}, *n)
	for range *n {
		todo <- struct{}{}
	}
	close(todo)
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range todo {
				conn, br, err := c.dial(ctx)
				if err == nil {
					if err = c.exchange(conn, br, false); err != nil {
						_ = conn.Close()
					}
				}
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					open = append(open, conn)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("after %d tunnels: %w", len(open), firstErr)
	}
	held, err := treeRSS(*pid)
	if err != nil {
		return err
	}
	count := len(open)
	closeAll()
	// What is measured next must not find the proxy still closing a thousand connections (TLS ones take it a
	// while): wait until it holds about as many files as before.
	settled, err := waitForFiles(ctx, *pid, fdsBefore+16, time.Minute)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "held=%d rss_idle_kib=%d rss_held_kib=%d settle_ms=%d\n", count, before, held, settled.Milliseconds())
	return err
}

// openFiles is how many files process pid has open.
func openFiles(pid int) (int, error) {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	return len(fds), err
}

// waitForFiles waits until process pid has at most n files open, and says how long that took.
func waitForFiles(ctx context.Context, pid, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		open, err := openFiles(pid)
		if err != nil {
			return 0, err
		}
		if open <= n {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("the proxy still has %d files open, more than %d, %s after the tunnels closed", open, n, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// treeRSS is the resident memory of pid and every process below it, in KiB: Squid is a master process with
// its helpers (and kids, with workers), and what the proxy costs is all of them.
func treeRSS(pid int) (int64, error) {
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The name in parentheses may hold spaces: the parent is the second field after its closing one.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
	}
	var total int64
	found := false
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		kib, err := processRSS(p)
		if err != nil {
			if p == pid {
				return 0, err
			}
			continue
		}
		found = true
		total += kib
	}
	if !found {
		return 0, fmt.Errorf("no process %d", pid)
	}
	return total, nil
}

func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// percentile is the p-th percentile of ds by the nearest-rank method; it sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
