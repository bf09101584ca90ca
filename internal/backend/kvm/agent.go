package kvm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The QEMU guest agent, reached through libvirt's qemu-agent-command RPC (virDomainQemuAgentCommand): one JSON
// command in, the agent's JSON answer out. libvirt relays it over the domain's org.qemu.guest_agent.0
// channel, so the provider needs no network path to the guest, which is what lets it change a proxy's rules
// on a remote host or behind a NAT the same way as on this one.

// agentPingSeconds bounds the guest-ping Get makes on every refresh. A healthy agent answers in
// milliseconds; one that takes longer is not one to send a reconfiguration to. libvirt counts in seconds.
var agentPingSeconds int32 = 2

// agentCallSeconds bounds every other agent command: file writes and reads, starting a program and asking
// how it ended. Each is quick inside the guest; ctx bounds the whole operation.
var agentCallSeconds int32 = 10

// agentChunk is how much of a file one guest-file-write carries (before base64). The agent reads commands of
// any size, but smaller messages keep each call short and far from any limit on the way.
const agentChunk = 48 << 10

// agentErr is a classified agent failure: Permanent when the domain has no agent channel (or is not
// running, or the agent refused the command), Transient when the agent is configured but did not answer.
// Classified here because libvirt's codes alone do not say it: AGENT_COMMAND_TIMEOUT, for one, is worth
// another try, which errors.go could not know.
func agentErr(class backend.Class, reason string, err error) error {
	if err == nil {
		return backend.NewError(class, "", errors.New(reason))
	}
	return backend.NewError(class, "", fmt.Errorf("%s: %w", reason, err))
}

// reasonNoAgent is the Permanent error's wording: the contract says a proxy without an agent cannot be
// reconfigured in place, and the provider shows this to explain a replacement.
const reasonNoAgent = "cannot be reconfigured in place: the domain has no QEMU guest agent channel"

// agentFailure classifies what libvirt said about an agent command. Codes libvirt gives (qemuDomainAgentAvailable,
// qemuAgentCommand): ARGUMENT_UNSUPPORTED "QEMU guest agent is not configured" (no channel in the domain),
// OPERATION_INVALID "domain is not running", AGENT_UNRESPONSIVE "not connected" or "not available for now",
// AGENT_COMMAND_TIMEOUT, and AGENT_COMMAND_FAILED for an error the agent itself returned.
func agentFailure(cmd string, err error) error {
	var le libvirt.Error
	if !errors.As(err, &le) {
		return fmt.Errorf("guest agent %s: %w", cmd, err) // the connection to libvirt: errors.go classifies it
	}
	switch libvirt.ErrorNumber(le.Code) {
	case libvirt.ErrArgumentUnsupported:
		return agentErr(backend.ClassPermanent, reasonNoAgent, err)
	case libvirt.ErrOperationInvalid:
		return agentErr(backend.ClassPermanent, "cannot be reconfigured while the domain is not running: start it", err)
	case libvirt.ErrAgentUnresponsive, libvirt.ErrAgentCommandTimeout:
		return agentErr(backend.ClassTransient, "the guest agent is not answering (is qemu-guest-agent running in the guest?)", err)
	case libvirt.ErrAgentCommandFailed:
		return agentErr(backend.ClassPermanent, fmt.Sprintf("the guest agent refused %s", cmd), err)
	case libvirt.ErrInternalError:
		// libvirt 9.0 (Debian 12) reports the agent's own error reply this way (qemuAgentCheckError),
		// where newer versions use AGENT_COMMAND_FAILED: a no such file, say, which no retry changes.
		if strings.Contains(le.Message, "unable to execute QEMU agent command") {
			return agentErr(backend.ClassPermanent, fmt.Sprintf("the guest agent refused %s", cmd), err)
		}
	}
	return fmt.Errorf("guest agent %s: %w", cmd, err)
}

// agentCall sends one command and decodes its "return" member into ret (nil: the answer is not needed).
func agentCall(l api, dom libvirt.Domain, timeout int32, cmd string, args, ret any) error {
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{cmd, args}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	res, err := l.QEMUDomainAgentCommand(dom, string(b), timeout, 0)
	if err != nil {
		return agentFailure(cmd, err)
	}
	if len(res) == 0 {
		return agentErr(backend.ClassTransient, fmt.Sprintf("guest agent %s: empty answer", cmd), nil)
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(res[0]), &reply); err != nil {
		return fmt.Errorf("guest agent %s: reading its answer %q: %w", cmd, res[0], err)
	}
	if reply.Error != nil {
		return agentErr(backend.ClassPermanent, fmt.Sprintf("guest agent %s failed: %s: %s", cmd, reply.Error.Class, reply.Error.Desc), nil)
	}
	if ret == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Return, ret); err != nil {
		return fmt.Errorf("guest agent %s: reading its answer %s: %w", cmd, reply.Return, err)
	}
	return nil
}

// agentPing reports nil when the agent answered guest-ping within agentPingSeconds.
func agentPing(l api, dom libvirt.Domain) error {
	return agentCall(l, dom, agentPingSeconds, "guest-ping", nil, nil)
}

// guestWriteFile writes data to path in the guest, creating or truncating it.
func guestWriteFile(l api, dom libvirt.Domain, path string, data []byte) error {
	var h int64
	if err := agentCall(l, dom, agentCallSeconds, "guest-file-open", map[string]any{"path": path, "mode": "w"}, &h); err != nil {
		return fmt.Errorf("opening %s in the guest: %w", path, err)
	}
	werr := func() error {
		for off := 0; off < len(data) || off == 0; off += agentChunk {
			chunk := data[off:min(off+agentChunk, len(data))]
			var ret struct {
				Count int `json:"count"`
			}
			args := map[string]any{"handle": h, "buf-b64": base64.StdEncoding.EncodeToString(chunk)}
			if err := agentCall(l, dom, agentCallSeconds, "guest-file-write", args, &ret); err != nil {
				return err
			}
			if ret.Count != len(chunk) {
				return fmt.Errorf("the agent wrote %d of %d bytes", ret.Count, len(chunk))
			}
			if len(data) == 0 {
				break
			}
		}
		return nil
	}()
	cerr := agentCall(l, dom, agentCallSeconds, "guest-file-close", map[string]any{"handle": h}, nil)
	if werr != nil {
		return fmt.Errorf("writing %s in the guest: %w", path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("closing %s in the guest: %w", path, cerr)
	}
	return nil
}

// guestReadLimit bounds what is read back of a file in the guest: the largest rendered config is far smaller
// (proxyconf caps the lists), and so is what Squid logs while it reloads.
const guestReadLimit = 1 << 20

// guestReadFile reads path in the guest, at most guestReadLimit bytes.
func guestReadFile(l api, dom libvirt.Domain, path string) ([]byte, error) {
	return guestReadFileFrom(l, dom, path, 0)
}

// guestReadFileFrom reads path in the guest from offset on, at most guestReadLimit bytes.
func guestReadFileFrom(l api, dom libvirt.Domain, path string, offset int64) ([]byte, error) {
	var h int64
	if err := agentCall(l, dom, agentCallSeconds, "guest-file-open", map[string]any{"path": path, "mode": "r"}, &h); err != nil {
		return nil, fmt.Errorf("opening %s in the guest: %w", path, err)
	}
	var out []byte
	rerr := func() error {
		if offset > 0 {
			args := map[string]any{"handle": h, "offset": offset, "whence": "set"}
			if err := agentCall(l, dom, agentCallSeconds, "guest-file-seek", args, nil); err != nil {
				return err
			}
		}
		for len(out) <= guestReadLimit {
			var ret struct {
				Count int    `json:"count"`
				Buf   string `json:"buf-b64"`
				EOF   bool   `json:"eof"`
			}
			if err := agentCall(l, dom, agentCallSeconds, "guest-file-read", map[string]any{"handle": h, "count": agentChunk}, &ret); err != nil {
				return err
			}
			b, err := base64.StdEncoding.DecodeString(ret.Buf)
			if err != nil {
				return fmt.Errorf("decoding what the agent read: %w", err)
			}
			out = append(out, b...)
			if ret.EOF || ret.Count == 0 {
				return nil
			}
		}
		return fmt.Errorf("longer than %d bytes", guestReadLimit)
	}()
	cerr := agentCall(l, dom, agentCallSeconds, "guest-file-close", map[string]any{"handle": h}, nil)
	if rerr != nil {
		return nil, fmt.Errorf("reading %s in the guest: %w", path, rerr)
	}
	if cerr != nil {
		return nil, fmt.Errorf("closing %s in the guest: %w", path, cerr)
	}
	return out, nil
}

// guestFileSize is the size of path in the guest (its end, as guest-file-seek reports it); 0 when the file
// does not exist yet.
func guestFileSize(l api, dom libvirt.Domain, path string) (int64, error) {
	var h int64
	if err := agentCall(l, dom, agentCallSeconds, "guest-file-open", map[string]any{"path": path, "mode": "r"}, &h); err != nil {
		if backend.ClassOf(err) == backend.ClassPermanent {
			return 0, nil //nolint:nilerr // no such file: everything written from now on is new
		}
		return 0, fmt.Errorf("opening %s in the guest: %w", path, err)
	}
	var ret struct {
		Position int64 `json:"position"`
	}
	serr := agentCall(l, dom, agentCallSeconds, "guest-file-seek", map[string]any{"handle": h, "offset": 0, "whence": "end"}, &ret)
	cerr := agentCall(l, dom, agentCallSeconds, "guest-file-close", map[string]any{"handle": h}, nil)
	if serr != nil {
		return 0, fmt.Errorf("finding the end of %s in the guest: %w", path, serr)
	}
	if cerr != nil {
		return 0, fmt.Errorf("closing %s in the guest: %w", path, cerr)
	}
	return ret.Position, nil
}

// guestFileExists reports whether path can be opened for reading in the guest.
func guestFileExists(l api, dom libvirt.Domain, path string) (bool, error) {
	var h int64
	err := agentCall(l, dom, agentCallSeconds, "guest-file-open", map[string]any{"path": path, "mode": "r"}, &h)
	switch {
	case err != nil && backend.ClassOf(err) == backend.ClassPermanent:
		return false, nil //nolint:nilerr // the agent could not open it: no such file
	case err != nil:
		return false, err
	}
	return true, agentCall(l, dom, agentCallSeconds, "guest-file-close", map[string]any{"handle": h}, nil)
}

// execResult is how a program run by the agent ended.
type execResult struct {
	exitCode       int
	stdout, stderr string
}

// execStatusInterval spaces the guest-exec-status polls: the programs run here finish in well under a second.
var execStatusInterval = 100 * time.Millisecond

// guestExec runs path with args in the guest (as root, no shell) and waits, within ctx, until it ends. Only
// fixed commands of this package are run: no user value ever becomes an argument.
func guestExec(ctx context.Context, c *conn, dom libvirt.Domain, path string, args ...string) (execResult, error) {
	var pid int64
	err := c.do(ctx, func(l api) error {
		var ret struct {
			PID int64 `json:"pid"`
		}
		a := map[string]any{"path": path, "arg": args, "capture-output": true}
		if err := agentCall(l, dom, agentCallSeconds, "guest-exec", a, &ret); err != nil {
			return err
		}
		pid = ret.PID
		return nil
	})
	if err != nil {
		return execResult{}, err
	}
	var res execResult
	// The agent reports a program's end once and then forgets its pid. A status call whose answer was lost
	// (the connection, a timeout) may have been that report: the agent then refuses the pid, and the
	// program ran to an end nobody heard.
	statusMayBeLost := false
	err = backend.Poll(ctx, execStatusInterval, func(ctx context.Context) (bool, error) {
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			Signal   int    `json:"signal"`
			Out      string `json:"out-data"`
			Err      string `json:"err-data"`
		}
		err := c.do(ctx, func(l api) error {
			return agentCall(l, dom, agentCallSeconds, "guest-exec-status", map[string]any{"pid": pid}, &st)
		})
		if err != nil {
			err = classify("", err)
			switch backend.ClassOf(err) {
			case backend.ClassTransient:
				statusMayBeLost = true
			case backend.ClassPermanent:
				if statusMayBeLost {
					return false, backend.NewError(backend.ClassPermanent, "", &exitStatusLostError{path: path, err: err})
				}
			}
			return false, err
		}
		if !st.Exited {
			return false, nil
		}
		out, _ := base64.StdEncoding.DecodeString(st.Out) // output is for messages only: undecodable is empty
		errOut, _ := base64.StdEncoding.DecodeString(st.Err)
		res = execResult{exitCode: st.ExitCode, stdout: string(out), stderr: string(errOut)}
		if st.Signal != 0 {
			res.exitCode = 128 + st.Signal
		}
		return true, nil
	})
	if lost := (*exitStatusLostError)(nil); errors.As(err, &lost) {
		// Permanent only to end the poll: the step is to be run again, from what the guest now holds.
		return execResult{}, backend.NewError(backend.ClassTransient, "", lost)
	}
	return res, err
}

// exitStatusLostError is a program in the guest that ended while the answer reporting it was lost.
type exitStatusLostError struct {
	path string
	err  error // the agent's refusal of the pid
}

func (e *exitStatusLostError) Error() string {
	return fmt.Sprintf("%s ran in the guest, and the answer reporting how it ended was lost with the connection (%v)", e.path, e.err)
}

func (e *exitStatusLostError) Unwrap() error { return e.err }

// reconfigurable is Get's cheap answer to "can Reconfigure change this running proxy in place": one
// guest-ping, bounded by agentPingSeconds. libvirt answers at once, without asking the guest, when the
// domain has no agent channel or the agent is not connected; only a connected agent that is slow to answer
// costs the bound. Get asks only for a running domain: a stopped one has no agent to ask.
func reconfigurable(l api, dom libvirt.Domain) bool {
	return agentPing(l, dom) == nil
}
