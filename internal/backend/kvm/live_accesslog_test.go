package kvm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// checkAccessLogOnVM is TestLiveReconfigure's access log part, on the booted proxy it made (issue 40): the
// lines Squid wrote to its access log file are in the guest's journal, each exactly, in order, under
// guest.JournalIdentifier; then the syslog target is set in place (Update, through the guest agent), first
// over UDP and then over TCP, to receivers the test runs on the test network's host side, and every request
// sent through the proxy after that reaches the receiver as the same line, as the message of an RFC 5424
// record from the access log's identifier.
func checkAccessLogOnVM(t *testing.T, b *Backend, spec backend.Spec, proxy string, urls []string) {
	t.Helper()
	id := idOf(spec)
	fileLines := func() []string { return nonEmptyLines(outputInGuest(t, b, spec.Name, "/bin/cat", accessLogPath)) }
	journalLines := func() []string {
		return nonEmptyLines(outputInGuest(t, b, spec.Name, "/bin/journalctl", "--no-pager", "-o", "cat", "-t", guest.JournalIdentifier))
	}
	var inFile, inJournal []string
	waitFor(t, 2*time.Minute, "the access log's lines in the guest's journal", func() bool {
		inFile, inJournal = fileLines(), journalLines()
		return len(inFile) > 0 && slices.Equal(inFile, inJournal)
	})
	for _, line := range inFile {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("the journal holds an access log line that is not JSON (%v): %s", err, line)
		}
	}
	t.Logf("the journal holds the access log's %d lines as Squid wrote them", len(inFile))

	for _, protocol := range []string{"udp", "tcp"} {
		rcv := receiveSyslogInNetns(t, protocol)
		withTarget := spec
		opts := *optionsOf(spec.Placement)
		opts.SyslogTarget = fmt.Sprintf("%s://%s", protocol, rcv.addr)
		withTarget.Placement.Options = &opts
		start := time.Now()
		got, err := b.Update(ctxFor(t, 5*time.Minute), id, withTarget)
		if err != nil {
			t.Fatalf("Update to syslog target %s: %v", opts.SyslogTarget, err)
		}
		t.Logf("Update (syslog target %s): %s", opts.SyslogTarget, time.Since(start).Round(10*time.Millisecond))
		if o, _ := got.Placement.Options.(*Options); o == nil || o.SyslogTarget != opts.SyslogTarget {
			t.Errorf("Get after Update reads syslog target %+v, want %s", got.Placement.Options, opts.SyslogTarget)
		}
		before := len(fileLines())
		for _, u := range urls {
			viaProxy(t, proxy, "", u)
		}
		var sent []string
		waitFor(t, time.Minute, "the requests' access log lines at the "+protocol+" receiver", func() bool {
			if all := fileLines(); len(all) >= before+len(urls) {
				sent = all[before:]
			}
			return sent != nil && len(rcv.messages()) >= len(sent)
		})
		msgs := rcv.messages()
		var lines []string
		for _, m := range msgs {
			app, line, err := rfc5424Message(m)
			if err != nil || app != guest.JournalIdentifier {
				t.Errorf("%s receiver got %q: app %q, %v; want an RFC 5424 record from %s", protocol, m, app, err, guest.JournalIdentifier)
				continue
			}
			lines = append(lines, line)
		}
		if !slices.Equal(lines, sent) {
			t.Errorf("the %s receiver got\n%s\nwant the access log's new lines\n%s", protocol, strings.Join(lines, "\n"), strings.Join(sent, "\n"))
		}
	}
}

// accessLogPath is where Squid writes its access log in the guest.
const accessLogPath = "/var/log/squid/access.log"

func nonEmptyLines(s string) []string {
	return slices.DeleteFunc(strings.Split(s, "\n"), func(l string) bool { return l == "" })
}

// rfc5424Message splits "<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG" and returns APP and MSG. The
// structured data of the access log's records is "-" (none).
func rfc5424Message(record string) (app, msg string, err error) {
	f := strings.SplitN(record, " ", 8)
	if len(f) != 8 || !strings.HasPrefix(f[0], "<") || !strings.HasSuffix(f[0], ">1") || f[6] != "-" {
		return "", "", errors.New("not an RFC 5424 record without structured data")
	}
	return f[3], f[7], nil
}

// syslogReceiver is a syslog server the test runs on the test network's bridge address, inside the test
// namespace: the guest reaches it, nothing outside the namespace does.
type syslogReceiver struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func (r *syslogReceiver) add(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, strings.TrimRight(m, "\n"))
}

func (r *syslogReceiver) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// receiveSyslogInNetns receives syslog over UDP (a record a datagram) or TCP (a record a line, rsyslog's
// default framing) until the test ends.
func receiveSyslogInNetns(t *testing.T, protocol string) *syslogReceiver {
	t.Helper()
	r := &syslogReceiver{}
	address := net.JoinHostPort(liveGateway, "0")
	switch protocol {
	case "udp":
		var pc net.PacketConn
		if err := testutil.InNetns(liveNetns(), func() (err error) { pc, err = net.ListenPacket("udp", address); return err }); err != nil {
			t.Fatalf("listening in namespace %s: %v", liveNetns(), err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		r.addr = pc.LocalAddr().String()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return // closed when the test ends
				}
				r.add(string(buf[:n]))
			}
		}()
	case "tcp":
		l, err := testutil.ListenInNetns(liveNetns(), "tcp", address)
		if err != nil {
			t.Fatalf("listening in namespace %s: %v", liveNetns(), err)
		}
		t.Cleanup(func() { _ = l.Close() })
		r.addr = l.Addr().String()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return // closed when the test ends
				}
				t.Cleanup(func() { _ = c.Close() })
				go func() {
					s := bufio.NewScanner(c)
					s.Buffer(make([]byte, 64<<10), 64<<10)
					for s.Scan() {
						r.add(s.Text())
					}
				}()
			}
		}()
	default:
		t.Fatalf("no receiver for %q", protocol)
	}
	return r
}

// outputInGuest runs a program in the guest of the proxy name through its agent and returns its standard
// output; the test fails unless it exits 0.
func outputInGuest(t *testing.T, b *Backend, name string, argv ...string) string {
	t.Helper()
	res := execInGuest(t, b, lookupDomain(t, b, name), argv...)
	if res.exitCode != 0 {
		t.Fatalf("%v in the guest: exit %d: %s %s", argv, res.exitCode, res.stdout, res.stderr)
	}
	return res.stdout
}
