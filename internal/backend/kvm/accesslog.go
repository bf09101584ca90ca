package kvm

import (
	"bytes"
	"context"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// The access log's syslog target (issue 40): the guest's rsyslog follows Squid's access log into its journal
// on every proxy, and forwards it to the target when the placement names one (guest.RenderAccessLog). The
// target changes in place, through the guest agent, as the rules do.

// SyslogSchemes are the transports syslog_target may name, for the schema's description.
var SyslogSchemes = guest.SyslogSchemes

// JournalIdentifier is the identifier the access log's lines carry in the guest's journal.
const JournalIdentifier = guest.JournalIdentifier

// ValidateSyslogTarget accepts "" (no forwarding), "udp://HOST:PORT" and "tcp://HOST:PORT".
func ValidateSyslogTarget(s string) error {
	_, err := syslogTargetOf(s)
	return err
}

// syslogTargetOf is the parsed target, nil for none.
func syslogTargetOf(s string) (*guest.SyslogTarget, error) {
	if s == "" {
		return nil, nil
	}
	t, err := guest.ParseSyslogTarget(s)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// rsyslogNew is where the new drop-in is written and checked before it replaces the one in force; its name
// does not end in .conf, so rsyslog never reads it as part of its configuration. rsyslogCheck is the
// configuration rsyslogd -N1 checks it in: a drop-in alone lacks the work directory the main configuration
// sets first, where imfile keeps its position, and rsyslogd refuses it for that.
const (
	rsyslogNew   = guest.RsyslogConfPath + ".egress-new"
	rsyslogCheck = guest.RsyslogConfPath + ".egress-check"
)

var rsyslogCheckConf = []byte(`global(workDirectory="/var/spool/rsyslog")
include(file="` + rsyslogNew + `")
`)

// rsyslogRestartWait bounds how long rsyslog may take to come back after its restart.
var rsyslogRestartWait = 60 * time.Second

// applySyslogTarget makes the guest forward its access log to target ("" for the journal only): the drop-in is
// written beside the one in force, checked by rsyslogd -N1, renamed into place and rsyslog restarted; rsyslog
// keeps its position in the access log across the restart (guest.RenderAccessLog), so no line is lost or sent
// twice. When the guest's drop-in already says the same, nothing is touched: a retry is one change. A
// failure before the rename leaves the old drop-in in force.
func applySyslogTarget(ctx context.Context, c *conn, dom libvirt.Domain, target string) error {
	t, err := syslogTargetOf(target)
	if err != nil {
		return backend.NewError(backend.ClassPermanent, "", err)
	}
	want := guest.RenderAccessLog(t)
	var have []byte
	if err := c.do(ctx, func(l api) error {
		if err := agentPing(l, dom); err != nil {
			return err
		}
		var err error
		have, err = guestReadFile(l, dom, guest.RsyslogConfPath)
		return retryableOnly(err)
	}); err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return nil
	}
	if err := c.do(ctx, func(l api) error {
		if err := guestWriteFile(l, dom, rsyslogNew, want); err != nil {
			return err
		}
		return guestWriteFile(l, dom, rsyslogCheck, rsyslogCheckConf)
	}); err != nil {
		return err
	}
	r := &reconfiguration{c: c}
	for _, argv := range [][]string{
		{"/bin/chmod", "0644", rsyslogNew},
		{"/usr/sbin/rsyslogd", "-N1", "-f", rsyslogCheck},
	} {
		if err := r.mustRun(ctx, dom, argv...); err != nil {
			_, _ = r.run(ctx, dom, "/bin/rm", "-f", rsyslogNew, rsyslogCheck) // best effort: never read by rsyslog
			return refusal(err, "the guest's rsyslog refused the new access log forwarding")
		}
	}
	_, _ = r.run(ctx, dom, "/bin/rm", "-f", rsyslogCheck) // best effort: a leftover is never read by rsyslog
	if err := r.mustRun(ctx, dom, "/bin/mv", "-f", rsyslogNew, guest.RsyslogConfPath); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, rsyslogRestartWait)
	defer cancel()
	if err := r.mustRun(rctx, dom, "/bin/systemctl", "restart", "rsyslog.service"); err != nil {
		return fmt.Errorf("restarting rsyslog in the guest with the new access log forwarding: %w", err)
	}
	return nil
}

// recordSyslogTarget rewrites the seed with m's syslog target, so that it describes what the guest runs, when
// the seed holds spec's rules: then it is rendered from them. When it does not, the rules change in the same
// apply, and Reconfigure's record writes the seed, from the metadata that carries the target by then.
func (b *Backend) recordSyslogTarget(l api, m metadata, spec backend.Spec) error {
	conf, err := proxyconf.RenderSquidConf(spec.Proxy, vmguest.MetricsSquidOptions(spec.Proxy, vmguest.RenderOptions()))
	if err != nil {
		return nil //nolint:nilerr // settings Reconfigure will refuse, with its reason: the seed waits for it
	}
	seed := volRef(m.Placement.Pool, m.Volumes.Seed)
	current, err := seedCurrent(l, seed, conf, spec.Proxy.Users, vmguest.ClientCAFiles(spec.Proxy, vmguest.RenderOptions()))
	if err != nil || !current {
		return err
	}
	img, err := seedImage(backend.Spec{Name: m.Name, UID: m.UID, Proxy: spec.Proxy}, m, b.now())
	if err != nil {
		return backend.NewError(backend.ClassPermanent, "", err)
	}
	if err := rewriteSeed(l, seed, img); err != nil {
		return fmt.Errorf("rewriting the seed volume %s: %w", m.Volumes.Seed, err)
	}
	return nil
}
