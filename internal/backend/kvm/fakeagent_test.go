package kvm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// fakeAgent is a guest's QEMU guest agent behind the fake host's qemu-agent-command, with the little of the
// guest it touches: files, the programs Reconfigure runs (squid -k parse/check/reconfigure, mv, chown, chmod,
// rm) and what the running Squid enforces. The guest "boots" from its seed: on the agent's first use, the
// files come from the seed volume's user-data, as cloud-init writes them, and Squid runs them.
type fakeAgent struct {
	// notConnected answers "not connected" that many times first, as while the guest boots.
	notConnected int
	// hung times every command out, as an agent that stopped reading its channel.
	hung bool
	// Squid's behaviour in the guest.
	squidStopped, parseFails, reconfigureFails bool
	// backstopRefused makes nft -c refuse a ruleset; backstopLoaded is the one the kernel holds (the file
	// the prestart script last loaded).
	backstopRefused bool
	backstopLoaded  []byte
	// restarts counts Squid's restarts (a reload that also forgets cached logins).
	restarts int
	// rsyslogRefuses makes rsyslogd -N1 refuse a config; rsyslogLoaded is the access log drop-in rsyslog
	// last (re)started with.
	rsyslogRefuses bool
	rsyslogLoaded  []byte
	// metricsRunning: mtail and the Squid exporter run (vmguest.MetricsIfMissing started them, systemctl
	// disable --now stopped them); metricsBackstop is the backstop loaded when they last started.
	metricsRunning  bool
	metricsBackstop []byte
	// holding: the reload hold's table is loaded with the proxy port (guest.ReloadHold); holdRefused makes
	// nft refuse to load it; drained: the drain (guest.ReloadDrain) ran since the hold was loaded.
	// heldReloads and unheldReloads count Squid's reloads and restarts with and without the hold, its mark
	// and its drain in place.
	holding, holdRefused, drained bool
	heldReloads, unheldReloads    int
	// slowExec makes each program report "still running" once before its end, so callers must poll.
	slowExec bool
	// loseAnswerOf makes the next guest-exec of a program line starting with it run, and its answer be lost
	// as on a dropped connection: the program ran, the caller cannot know. dropBefore makes the next one
	// starting with it fail as a call the connection dropped before the guest saw it.
	loseAnswerOf, dropBefore string
	// loseStatusOf makes the guest-exec-status that reports the end of the next program line starting with
	// it be lost on the way back: the agent has forgotten the pid, as the real one does once it reported.
	loseStatusOf string

	// keepalivedStopped: systemctl stopped keepalived (guest.Retire); keepalivedPending: how many more
	// times it answers inactive before it runs (fakeHost.keepalivedStartsLate).
	keepalivedStopped bool
	keepalivedPending int

	booted   bool
	files    map[string][]byte
	enforced map[string][]byte // the squid.conf and htpasswd Squid last (re)loaded
	handles  map[int64]*fakeHandle
	execs    map[int64]fakeExec
	next     int64
	calls    map[string]int // by agent command
	ran      [][]string     // every program run, in order
}

type fakeHandle struct {
	path  string
	pos   int
	write bool
}

type fakeExec struct {
	code         int
	stdout, errs string
	statusAsked  bool // the first guest-exec-status says "still running", to make the caller poll
	line         string
}

// agent returns name's agent, making it on first use.
func (f *fakeHost) agent(name string) *fakeAgent {
	a, ok := f.agents[name]
	if !ok {
		a = &fakeAgent{keepalivedPending: f.keepalivedStartsLate}
		f.agents[name] = a
	}
	if a.files == nil {
		a.files, a.enforced, a.handles, a.execs, a.calls = map[string][]byte{}, map[string][]byte{}, map[int64]*fakeHandle{}, map[int64]fakeExec{}, map[string]int{}
	}
	return a
}

// bootFromSeed writes the files of the domain's seed user-data into the guest and starts Squid on them.
func (f *fakeHost) bootFromSeed(d *fakeDomain, a *fakeAgent) {
	a.booted = true
	m, err := parseMetadata(d.meta)
	if err != nil {
		return
	}
	v, ok := f.pools[m.Placement.Pool].vols[m.Volumes.Seed]
	if !ok {
		return
	}
	ud, err := iso9660.ReadFile(v.data, "user-data")
	if err != nil {
		return
	}
	for p, b := range userDataFiles(ud) {
		a.files[p] = b
	}
	a.files[proxyconf.CacheLogPath] = []byte("Starting Squid Cache\n" + reloadedMarker + " at conn1 local=[::]:3128\n")
	a.backstopLoaded = a.files[proxyconf.NftablesPath]
	a.rsyslogLoaded = a.files[guest.RsyslogConfPath]
	a.reload()
}

// countReload counts a reload or restart of Squid as held or not.
func (a *fakeAgent) countReload() {
	if _, marked := a.files[guest.ReloadMarkerPath]; marked && a.holding && a.drained {
		a.heldReloads++
	} else {
		a.unheldReloads++
	}
}

func (a *fakeAgent) reload() {
	a.enforced = map[string][]byte{}
	for _, p := range []string{proxyconf.ConfPath, proxyconf.HtpasswdPath} {
		if b, ok := a.files[p]; ok {
			a.enforced[p] = b
		}
	}
}

func (f *fakeHost) QEMUDomainAgentCommand(dom libvirt.Domain, cmd string, _ int32, _ uint32) (libvirt.OptString, error) {
	if err := f.hook("QEMUDomainAgentCommand"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.domain(dom)
	if err != nil {
		return nil, err
	}
	// libvirt's qemuDomainAgentAvailable, in its order.
	if d.state != int32(libvirt.DomainRunning) {
		return nil, lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running")
	}
	if !strings.Contains(d.xml, guestAgentChannel) {
		return nil, lvErr(libvirt.ErrArgumentUnsupported, "argument unsupported: QEMU guest agent is not configured")
	}
	a := f.agent(dom.Name)
	if a.notConnected > 0 {
		a.notConnected--
		return nil, lvErr(libvirt.ErrAgentUnresponsive, "Guest agent is not responding: QEMU guest agent is not connected")
	}
	if a.hung {
		return nil, lvErr(libvirt.ErrAgentCommandTimeout, "Guest agent not available for now: guest agent command timed out")
	}
	if !a.booted {
		f.bootFromSeed(d, a)
	}
	var req struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(cmd), &req); err != nil {
		return nil, lvErr(libvirt.ErrInternalError, "internal error: cannot parse json %s: %v", cmd, err)
	}
	if a.dropBefore != "" && req.Execute == "guest-exec" && strings.HasPrefix(strings.Join(execArgv(req.Arguments), " "), a.dropBefore) {
		a.dropBefore = ""
		return nil, io.EOF
	}
	a.calls[req.Execute]++
	ran := len(a.ran)
	statusOf := ""
	if req.Execute == "guest-exec-status" {
		var args struct {
			PID int64 `json:"pid"`
		}
		_ = json.Unmarshal(req.Arguments, &args) // a malformed request is the handler's to refuse
		statusOf = a.execs[args.PID].line
	}
	ret, fail := a.handle(req.Execute, req.Arguments)
	if req.Execute == "guest-exec" && strings.Join(execArgv(req.Arguments), " ") == "/bin/systemctl stop keepalived.service" {
		taken := false
		for name, peer := range f.agents {
			taken = taken || name != dom.Name && peer.keepalivedRuns()
		}
		if !taken {
			f.addressOrphaned = append(f.addressOrphaned, dom.Name)
		}
	}
	if st, ok := ret.(map[string]any); ok && a.loseStatusOf != "" && st["exited"] == true && strings.HasPrefix(statusOf, a.loseStatusOf) {
		a.loseStatusOf = ""
		return nil, io.EOF
	}
	if a.loseAnswerOf != "" && len(a.ran) > ran && strings.HasPrefix(strings.Join(a.ran[ran], " "), a.loseAnswerOf) {
		a.loseAnswerOf = ""
		return nil, io.EOF
	}
	if fail != "" {
		// As libvirt 9.0 (Debian 12) reports the agent's error reply; newer ones use AGENT_COMMAND_FAILED.
		return nil, lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command '%s': %s", req.Execute, fail)
	}
	b, err := json.Marshal(map[string]any{"return": ret})
	if err != nil {
		return nil, lvErr(libvirt.ErrInternalError, "%v", err)
	}
	return libvirt.OptString{string(b)}, nil
}

// handle runs one agent command: its return value, or the agent's error description.
func (a *fakeAgent) handle(cmd string, raw json.RawMessage) (any, string) {
	var args struct {
		Path    string   `json:"path"`
		Mode    string   `json:"mode"`
		Handle  int64    `json:"handle"`
		Buf     string   `json:"buf-b64"`
		Count   int      `json:"count"`
		Offset  int      `json:"offset"`
		Whence  string   `json:"whence"`
		Arg     []string `json:"arg"`
		PID     int64    `json:"pid"`
		Capture bool     `json:"capture-output"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, fmt.Sprintf("Invalid parameter: %v", err)
		}
	}
	h := a.handles[args.Handle]
	if strings.HasPrefix(cmd, "guest-file-") && cmd != "guest-file-open" && h == nil {
		return nil, fmt.Sprintf("handle '%d' has not been found", args.Handle)
	}
	switch cmd {
	case "guest-ping":
		return struct{}{}, ""
	case "guest-file-open":
		switch args.Mode {
		case "r":
			if _, ok := a.files[args.Path]; !ok {
				return nil, fmt.Sprintf("failed to open file '%s' (mode: 'r'): No such file or directory", args.Path)
			}
		case "w":
			a.files[args.Path] = nil
		default:
			return nil, "unsupported mode " + args.Mode
		}
		a.next++
		a.handles[a.next] = &fakeHandle{path: args.Path, write: args.Mode == "w"}
		return a.next, ""
	case "guest-file-write":
		b, err := base64.StdEncoding.DecodeString(args.Buf)
		if err != nil || !h.write {
			return nil, "cannot write"
		}
		data := append(a.files[h.path][:h.pos:h.pos], b...)
		a.files[h.path] = data
		h.pos = len(data)
		return map[string]any{"count": len(b), "eof": false}, ""
	case "guest-file-read":
		data := a.files[h.path]
		end := min(h.pos+args.Count, len(data))
		chunk := data[min(h.pos, len(data)):end]
		h.pos = end
		return map[string]any{"count": len(chunk), "buf-b64": base64.StdEncoding.EncodeToString(chunk), "eof": h.pos >= len(data)}, ""
	case "guest-file-seek":
		switch args.Whence {
		case "set":
			h.pos = args.Offset
		case "end":
			h.pos = len(a.files[h.path]) + args.Offset
		default:
			return nil, "unsupported whence " + args.Whence
		}
		return map[string]any{"position": h.pos, "eof": h.pos >= len(a.files[h.path])}, ""
	case "guest-file-close":
		delete(a.handles, args.Handle)
		return struct{}{}, ""
	case "guest-exec":
		a.next++
		argv := append([]string{args.Path}, args.Arg...)
		e := a.run(argv)
		e.line = strings.Join(argv, " ")
		a.execs[a.next] = e
		return map[string]any{"pid": a.next}, ""
	case "guest-exec-status":
		e, ok := a.execs[args.PID]
		if !ok {
			return nil, fmt.Sprintf("Invalid parameter 'pid': %d", args.PID)
		}
		if a.slowExec && !e.statusAsked {
			e.statusAsked = true
			a.execs[args.PID] = e
			return map[string]any{"exited": false}, ""
		}
		delete(a.execs, args.PID) // the agent forgets a process once it reported its end
		return map[string]any{"exited": true, "exitcode": e.code,
			"out-data": base64.StdEncoding.EncodeToString([]byte(e.stdout)),
			"err-data": base64.StdEncoding.EncodeToString([]byte(e.errs))}, ""
	}
	return nil, fmt.Sprintf("The command %s has not been found", cmd)
}

// run is a program in the guest: what it does to the files and Squid, and how it exits.
func (a *fakeAgent) run(argv []string) fakeExec {
	a.ran = append(a.ran, argv)
	missing := func(paths []string) string {
		for _, p := range paths {
			if _, ok := a.files[p]; !ok {
				return p
			}
		}
		return ""
	}
	cmd := strings.Join(argv, " ")
	switch {
	case argv[0] == "/bin/chown" || argv[0] == "/bin/chmod":
		if p := missing(argv[2:]); p != "" {
			return fakeExec{code: 1, errs: fmt.Sprintf("%s: cannot access '%s': No such file or directory", argv[0], p)}
		}
		return fakeExec{}
	case argv[0] == "/bin/cp" && len(argv) == 4:
		b, ok := a.files[argv[2]]
		if !ok {
			return fakeExec{code: 1, errs: fmt.Sprintf("cp: cannot stat '%s': No such file or directory", argv[2])}
		}
		a.files[argv[3]] = bytes.Clone(b)
		return fakeExec{}
	case argv[0] == "/bin/rm":
		for _, p := range argv[2:] {
			delete(a.files, p)
		}
		return fakeExec{}
	case argv[0] == "/bin/mv" && len(argv) == 4:
		b, ok := a.files[argv[2]]
		if !ok {
			return fakeExec{code: 1, errs: fmt.Sprintf("mv: cannot stat '%s': No such file or directory", argv[2])}
		}
		a.files[argv[3]] = b
		delete(a.files, argv[2])
		return fakeExec{}
	case strings.HasPrefix(cmd, squidBin+" -k parse -f "):
		if _, ok := a.files[argv[4]]; !ok || a.parseFails {
			return fakeExec{code: 1, errs: "FATAL: Bungled " + argv[4] + " line 3: http_port"}
		}
		return fakeExec{}
	case strings.HasPrefix(cmd, nftBin+" -c -f "):
		if _, ok := a.files[argv[3]]; !ok || a.backstopRefused {
			return fakeExec{code: 1, errs: argv[3] + ":12:3-9: Error: syntax error"}
		}
		return fakeExec{}
	case cmd == "/bin/sh "+vmguest.PrestartPath+" "+vmguest.PrestartBackstop:
		b, ok := a.files[proxyconf.NftablesPath]
		if !ok {
			return fakeExec{code: 1, errs: "Error: Could not open file"}
		}
		a.backstopLoaded = b
		return fakeExec{}
	case strings.HasPrefix(cmd, "/usr/sbin/rsyslogd -N1 -f "):
		// The check configuration includes the drop-in to check: both must be there.
		if _, ok := a.files[argv[3]]; !ok || a.files[rsyslogNew] == nil || a.rsyslogRefuses {
			return fakeExec{code: 1, errs: "rsyslogd: error during parsing file " + argv[3] + ", on or before line 9"}
		}
		return fakeExec{}
	case cmd == "/bin/systemctl restart rsyslog.service":
		a.rsyslogLoaded = a.files[guest.RsyslogConfPath]
		return fakeExec{}
	case argv[0] == "/bin/mkdir" || cmd == "/bin/systemctl daemon-reload":
		return fakeExec{}
	case cmd == "/bin/systemctl disable --now "+strings.Join(vmguest.MetricsUnits, " "):
		a.metricsRunning = false
		return fakeExec{}
	case cmd == "/bin/systemctl is-active --quiet "+strings.Join(vmguest.MetricsUnits, " "):
		if !a.metricsRunning {
			return fakeExec{code: 3}
		}
		return fakeExec{}
	case cmd == "/bin/sh -c "+vmguest.MetricsIfMissing:
		if p := missing(vmguest.MetricsPaths); p != "" {
			return fakeExec{code: 1, errs: "mtail.service: " + p + " missing"}
		}
		a.metricsRunning, a.metricsBackstop = true, a.backstopLoaded
		return fakeExec{}
	case cmd == squidBin+" -k check":
		if a.squidStopped {
			return fakeExec{code: 1, errs: "squid: ERROR: No running copy"}
		}
		return fakeExec{}
	case cmd == "/usr/bin/touch "+guest.ReloadMarkerPath:
		a.files[guest.ReloadMarkerPath] = nil
		return fakeExec{}
	case len(argv) == 2 && argv[0] == nftBin && strings.HasPrefix(argv[1], "add table inet "+guest.ReloadHoldTable+";"):
		hold := strings.Contains(argv[1], "add element")
		if hold && a.holdRefused {
			return fakeExec{code: 1, errs: "Error: Could not process rule: No such file or directory"}
		}
		a.holding, a.drained = hold, false
		return fakeExec{}
	case cmd == strings.Join(guest.Retire(3128)[1], " "):
		return fakeExec{}
	case cmd == "/bin/systemctl stop keepalived.service":
		a.keepalivedStopped = true
		return fakeExec{}
	case cmd == "/bin/systemctl is-active --quiet keepalived.service":
		if !a.keepalivedRuns() {
			a.keepalivedPending = max(a.keepalivedPending-1, 0)
			return fakeExec{code: 3}
		}
		return fakeExec{}
	case cmd == strings.Join(guest.ReloadDrain(3128), " "):
		a.drained = a.holding
		return fakeExec{}
	case cmd == "/bin/systemctl restart squid.service":
		a.countReload()
		if a.reconfigureFails {
			return fakeExec{code: 1, errs: "Job for squid.service failed because the control process exited with error code."}
		}
		a.squidStopped = false
		a.restarts++
		a.reload()
		a.files[proxyconf.CacheLogPath] = append(a.files[proxyconf.CacheLogPath],
			"Starting Squid Cache version 5.7\n"+reloadedMarker+" at conn1 local=[::]:3128\n"...)
		return fakeExec{}
	case cmd == squidBin+" -k reconfigure":
		a.countReload()
		if a.squidStopped || a.reconfigureFails {
			return fakeExec{code: 1, errs: "squid: ERROR: Could not send signal 1 to process 312: (3) No such process"}
		}
		a.reload()
		a.files[proxyconf.CacheLogPath] = append(a.files[proxyconf.CacheLogPath],
			"Reconfiguring Squid Cache (version 5.7)...\n"+reloadedMarker+" at conn2 local=[::]:3128\n"...)
		return fakeExec{}
	}
	return fakeExec{code: 127, errs: argv[0] + ": not found"}
}

// execArgv is the program line of a guest-exec's arguments.
func execArgv(raw json.RawMessage) []string {
	var args struct {
		Path string   `json:"path"`
		Arg  []string `json:"arg"`
	}
	_ = json.Unmarshal(raw, &args) // a malformed request is the handler's to refuse
	return append([]string{args.Path}, args.Arg...)
}

// keepalivedRuns says whether the guest's keepalived runs: booted, started, not stopped.
func (a *fakeAgent) keepalivedRuns() bool {
	return a.booted && a.keepalivedPending == 0 && !a.keepalivedStopped
}
