package kvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

var _ backend.Reconfigurer = (*Backend)(nil)

// Paths in the guest. The new files are written beside the ones they replace, so the rename that installs
// them stays on one file system and is atomic: Squid, and the auth helper that rereads the password file
// when it changes, see the old file or the new one, never half of one.
const (
	confNew     = proxyconf.ConfPath + ".egress-new"
	htpasswdNew = proxyconf.HtpasswdPath + ".egress-new"
	confOld     = proxyconf.ConfPath + ".egress-old"
	htpasswdOld = proxyconf.HtpasswdPath + ".egress-old"
	backstopNew = proxyconf.NftablesPath + ".egress-new"
	backstopOld = proxyconf.NftablesPath + ".egress-old"
	squidBin    = "/usr/sbin/squid"
	nftBin      = "/usr/sbin/nft"
)

// reloadedMarker is what Squid writes to its cache.log once a reconfiguration has reopened its listening
// ports; before that the old configuration may still be in force.
const reloadedMarker = "Accepting HTTP Socket connections"

// reloadWait bounds how long Squid may take to reload after `squid -k reconfigure` before Reconfigure reports
// it (within ctx): seconds under emulation, for a config that `squid -k parse` just accepted.
var reloadWait = 60 * time.Second

// Reconfigure changes the running proxy's rules through the QEMU guest agent. In order:
//
//  1. Render the new squid.conf (and htpasswd) and the backstop below Squid (proxyconf.RenderNftables) here:
//     Settings.Validate runs, so nothing unchecked is sent.
//  2. The backstop first, when the guest's differs (allowed_private_cidrs changed): write it beside the one
//     in force, check it with `nft -c`, rename it into place and load it with the script squid.service runs
//     before every start; a failed load puts the old file back.
//  3. Read the guest's current Squid files back: when they already say the same (the config byte for byte,
//     the password by its bcrypt hash), the guest is not touched, which is what makes a retry or a repeated
//     apply one change and not several.
//  4. Otherwise write both to temporary files in the guest, run `squid -k parse` on the new config, check
//     Squid runs, copy the files in force aside, rename the new ones into place and run `squid -k
//     reconfigure`, checking every exit status, then wait for Squid's log to say it reopened its ports, and
//     for its health endpoint to answer. A failure before the rename removes the temporary files, one of
//     the reload puts the copies back: the old configuration stays in force, and on the guest's disk.
//     Metrics turned on, off or moved: the old metrics programs stop before the backstop changes, the new
//     ones start once Squid took the new config (reconfigure_metrics.go).
//  5. Rewrite the seed ISO's user-data, so that the seed describes what the guest runs (cloud-init writes
//     the files only on an instance's first boot; the guest's own disk keeps them over a reboot), and last
//     the domain's metadata, from which Get reports the settings.
//
// Agent errors are classified: an agent that does not answer is Transient, and the whole sequence is tried
// again until ctx ends; a domain without an agent channel is Permanent, as is a config Squid refuses.
//
// A proxy of several instances (ha.go) is reconfigured one instance at a time, instance 0 first, each
// confirmed (its Squid reloaded and answering its health endpoint) before the next is touched: the others
// serve meanwhile, and a refusal stops the rollout with the instances not yet reached on the old rules.
func (b *Backend) Reconfigure(ctx context.Context, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	c, err := b.connFor(id)
	if err != nil {
		return backend.Instance{}, err
	}
	ha, err := b.groupOf(ctx, c, id)
	if err != nil {
		return backend.Instance{}, err
	}
	ids := []backend.ProviderID{id}
	if ha != nil {
		ids = ids[:0]
		for i := range ha.Members {
			ids = append(ids, memberID(id, ha, i))
		}
	}
	var notes []string
	for _, mid := range ids {
		n, err := b.reconfigureDomain(ctx, c, mid, settings)
		if err != nil {
			return backend.Instance{}, err
		}
		notes = append(notes, n...)
	}
	inst, err := b.Get(ctx, id)
	inst.Notes = append(inst.Notes, notes...)
	return inst, err
}

// reconfigureDomain is Reconfigure of one domain; it returns the notes of what it could not verify.
func (b *Backend) reconfigureDomain(ctx context.Context, c *conn, id backend.ProviderID, settings proxyconf.Settings) ([]string, error) {
	object := domainObject(id.Target, id.Name)
	opts := vmguest.MetricsSquidOptions(settings, vmguest.RenderOptions())
	conf, err := proxyconf.RenderSquidConf(settings, opts)
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, object, fmt.Errorf("the new proxy settings: %w", err))
	}
	backstop, err := proxyconf.RenderNftables(settings)
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, object, fmt.Errorf("the new proxy settings: %w", err))
	}
	var htpasswd []byte
	if len(settings.Users) > 0 {
		if htpasswd, err = proxyconf.RenderHtpasswd(settings.Users); err != nil {
			return nil, backend.NewError(backend.ClassPermanent, object, err)
		}
	}
	r := &reconfiguration{b: b, c: c, id: id, settings: settings, conf: conf, htpasswd: htpasswd, backstop: backstop,
		caFiles: vmguest.ClientCAFiles(settings, vmguest.RenderOptions()), metricsFiles: vmguest.MetricsFiles(settings, opts.ManagerPort)}
	err = backend.Retry(ctx, agentBackoff, func(ctx context.Context) error { return classify(object, r.attempt(ctx)) })
	if err != nil {
		return nil, err
	}
	return r.notes, nil
}

// agentBackoff spaces attempts while the agent does not answer: it may be restarting, or the guest busy.
var agentBackoff = backend.Backoff{Initial: 500 * time.Millisecond, Max: 5 * time.Second, Factor: 2}

// reconfiguration is one Reconfigure call: what it sends, and what it learnt on the way.
type reconfiguration struct {
	b        *Backend
	c        *conn
	id       backend.ProviderID
	settings proxyconf.Settings
	conf     []byte
	htpasswd []byte
	backstop []byte
	// caFiles are the client CA and CRL the guest is to hold (none without them). Squid reads them while it
	// parses a config, so they are staged in place, the old ones backed up, before the new config is checked.
	caFiles []vmguest.File
	// metricsFiles are the metrics programs' files the guest is to hold (none without metrics), and
	// metricsPending is set once stopMetrics removed the old ones and cleared once startMetrics is done.
	metricsFiles   []vmguest.File
	metricsPending bool
	// backstopPending is set once the new backstop may be in place and cleared once it is loaded: a load
	// whose answer was lost is run again, though the file is current.
	backstopPending bool
	// guestChanged is set once the guest runs the new files, so a later attempt still rewrites the seed.
	guestChanged bool
	// newPassword: the guest has a password file that does not admit exactly the new users with their
	// passwords (a user added, removed or given another password): Squid keeps checked logins across a
	// reload, so it is restarted.
	newPassword bool
	// pendingReload is how Squid is to take the new files once they may be in place: set before the first
	// rename, cleared once Squid reported the reload. A rename or reload whose answer was lost leaves the
	// guest's files current while Squid may still run the old ones; the next attempt then only reloads.
	pendingReload []string
	// seedRecorded: this attempt found the guest's files current and read the seed holding them too, so
	// record has nothing to rewrite there (it does not read the volume a second time).
	seedRecorded bool
	notes        []string
}

// attempt runs the sequence once. It starts from what the guest holds, so running it again after any
// failure continues where the last one stopped.
func (r *reconfiguration) attempt(ctx context.Context) error {
	var dom libvirt.Domain
	var m metadata
	current := false
	err := r.c.do(ctx, func(l api) error {
		var err error
		if dom, m, err = lookupManaged(l, r.id.Name); err != nil {
			return err
		}
		if err := backend.OwnershipOf(ctx).Check("", m.Owner, m.UID); err != nil {
			return err
		}
		if r.settings.Port != m.Proxy.Port {
			return backend.Permanent("", "the proxy listens on port %d; a new port (%d) replaces the proxy, it is not reconfigured", m.Proxy.Port, r.settings.Port)
		}
		if err := agentPing(l, dom); err != nil {
			return err
		}
		r.seedRecorded = false
		current, err = r.guestCurrent(l, dom)
		if err != nil || !current || r.pendingReload != nil {
			return err
		}
		// The guest's files hold the new settings. Unless the seed does too, an earlier Reconfigure stopped
		// between moving them in and recording them (its answers lost, its restore too), and Squid may still
		// run the old ones: it is made to take them. Squid keeps checked logins across a reload, so with a
		// password it is restarted, as for a new one.
		r.seedRecorded, err = seedCurrent(l, volRef(m.Placement.Pool, m.Volumes.Seed), r.conf, r.settings.Users, r.caFiles)
		if err == nil && !r.seedRecorded {
			r.pendingReload = reloadCommand(len(r.settings.Users) > 0)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := r.stopMetrics(ctx, dom); err != nil {
		return err
	}
	if err := r.syncBackstop(ctx, dom); err != nil {
		return err
	}
	switch {
	case !current:
		if err := r.installInGuest(ctx, dom); err != nil {
			return err
		}
		r.guestChanged = true
	case r.pendingReload != nil:
		if err := r.reloadAgain(ctx, dom); err != nil {
			return err
		}
		r.guestChanged = true
	}
	if err := r.startMetrics(ctx, dom); err != nil {
		return err
	}
	if err := r.confirmHealth(ctx, dom, m); err != nil {
		return err
	}
	return r.c.do(ctx, func(l api) error { return r.record(l, dom, m) })
}

// guestCurrent reports whether the guest's files already hold the new settings.
func (r *reconfiguration) guestCurrent(l api, dom libvirt.Domain) (bool, error) {
	conf, err := guestReadFile(l, dom, proxyconf.ConfPath)
	if err != nil {
		return false, retryableOnly(err)
	}
	if len(r.settings.Users) > 0 {
		// Whether a password changes decides how Squid takes the change (installInGuest).
		pw, err := guestReadFile(l, dom, proxyconf.HtpasswdPath)
		if err != nil && retryableOnly(err) != nil {
			return false, err
		}
		// Only a password file that exists can have let anyone in: without one, a reload is enough.
		r.newPassword = err == nil && !proxyconf.HtpasswdMatches(pw, r.settings.Users)
		if err != nil {
			conf = nil // no password file yet: the new one must be written
		}
	}
	if !bytes.Equal(conf, r.conf) || r.newPassword {
		return false, nil
	}
	for _, f := range r.caFiles {
		have, err := guestReadFile(l, dom, f.Path)
		if err != nil {
			return false, retryableOnly(err)
		}
		if !bytes.Equal(have, f.Content) {
			return false, nil
		}
	}
	return true, nil
}

// retryableOnly keeps the errors worth another attempt (the agent not answering, the connection); any
// other failure to read a file (it does not exist, the agent refuses) only means it must be written.
func retryableOnly(err error) error {
	if backend.ClassOf(classify("", err)) == backend.ClassTransient {
		return err
	}
	return nil //nolint:nilerr // see above: the file is (re)written
}

// installInGuest writes the new files, checks them with Squid and swaps them in.
func (r *reconfiguration) installInGuest(ctx context.Context, dom libvirt.Domain) error {
	temps, err := r.writeTemps(ctx, dom)
	if err != nil {
		return err
	}
	caBackups, err := r.stageClientCA(ctx, dom)
	// Until the rename, a failure leaves the old files in force; the temporary ones are removed (best
	// effort: a leftover is overwritten by the next attempt and never read by Squid), and the client CA
	// files staged for the check put back.
	abandon := func(err error) error {
		_, _ = r.run(ctx, dom, append([]string{"/bin/rm", "-f"}, temps...)...)
		return r.restore(ctx, dom, caBackups, err)
	}
	if err != nil {
		return abandon(err)
	}
	if err := r.checkTemps(ctx, dom, temps); err != nil {
		return abandon(err)
	}
	mark, hadHtpasswd, err := r.beforeSwap(ctx, dom)
	if err != nil {
		return abandon(err)
	}
	backups, err := r.backUp(ctx, dom, hadHtpasswd)
	if err != nil {
		return abandon(err)
	}
	// A new password needs a restart: Squid keeps a user's checked credentials for credentialsttl, across a
	// reconfigure, so the old password would go on working for minutes. Everything else reloads in place,
	// without dropping connections.
	reload := reloadCommand(r.newPassword)
	r.pendingReload = reload
	if err := r.renameTemps(ctx, dom); err != nil {
		return r.restore(ctx, dom, backups, abandon(err))
	}
	release := r.hold(ctx, dom)
	if err := r.mustRun(ctx, dom, reload...); err != nil {
		err = r.restore(ctx, dom, append(backups, caBackups...), err)
		if r.newPassword {
			_, _ = r.run(ctx, dom, reload...) // best effort: back to the old files; err says what failed
		}
		_ = release() // best effort: err says what failed, and a hold ends by itself
		return err
	}
	r.dropBackups(ctx, dom, append(backups, caBackups...))
	if err := r.waitReloaded(ctx, dom, mark); err != nil {
		_ = release()
		return err
	}
	if err := release(); err != nil {
		return err // pendingReload stays: the retry holds, reloads and releases again
	}
	r.pendingReload = nil
	return nil
}

// writeTemps writes the new files beside the ones they replace and returns their paths.
func (r *reconfiguration) writeTemps(ctx context.Context, dom libvirt.Domain) ([]string, error) {
	temps := []string{confNew}
	if r.htpasswd != nil {
		temps = append(temps, htpasswdNew)
	}
	err := r.c.do(ctx, func(l api) error {
		if err := guestWriteFile(l, dom, confNew, r.conf); err != nil {
			return err
		}
		if r.htpasswd != nil {
			return guestWriteFile(l, dom, htpasswdNew, r.htpasswd)
		}
		return nil
	})
	return temps, err
}

// stageClientCA puts the new client CA files in place, each written beside its path, given the owner and mode
// cloud-init gives it, with the one in force copied aside first; it returns the copies to put back should
// the new config not be taken. Squid reads these files only when it loads a config, so the running one is
// untouched; the new config's check needs them where it names them.
func (r *reconfiguration) stageClientCA(ctx context.Context, dom libvirt.Domain) ([][2]string, error) {
	var backups [][2]string
	for _, f := range r.caFiles {
		staged, old := f.Path+".egress-new", f.Path+".egress-old"
		var had bool
		if err := r.c.do(ctx, func(l api) error {
			var err error
			if had, err = guestFileExists(l, dom, f.Path); err != nil {
				return err
			}
			return guestWriteFile(l, dom, staged, f.Content)
		}); err != nil {
			return backups, err
		}
		steps := [][]string{{"/bin/chown", "root:proxy", staged}, {"/bin/chmod", "0640", staged}}
		if had {
			steps = append(steps, []string{"/bin/cp", "-p", f.Path, old})
		}
		steps = append(steps, []string{"/bin/mv", "-f", staged, f.Path})
		for i, argv := range steps {
			if err := r.mustRun(ctx, dom, argv...); err != nil {
				_, _ = r.run(ctx, dom, "/bin/rm", "-f", staged) // best effort, never read by Squid
				return backups, err
			}
			if had && i == 2 {
				backups = append(backups, [2]string{f.Path, old})
			}
		}
	}
	return backups, nil
}

// checkTemps gives the new files their owner and mode and has Squid check the config, and that it runs at all,
// while the files in force are still untouched.
func (r *reconfiguration) checkTemps(ctx context.Context, dom libvirt.Domain, temps []string) error {
	// The files belong to root and are readable by the proxy group, as cloud-init writes them: the auth
	// helper runs as the proxy user.
	for _, argv := range [][]string{
		append([]string{"/bin/chown", "root:proxy"}, temps...),
		append([]string{"/bin/chmod", "0640"}, temps...),
	} {
		if err := r.mustRun(ctx, dom, argv...); err != nil {
			return err
		}
	}
	if err := r.mustRun(ctx, dom, squidBin, "-k", "parse", "-f", confNew); err != nil {
		return refusal(err, "squid in the guest refused the new config")
	}
	if err := r.mustRun(ctx, dom, squidBin, "-k", "check"); err != nil {
		return refusal(err, "squid is not running in the guest, so there is nothing to reconfigure")
	}
	return nil
}

// beforeSwap reads what the swap needs to know of the guest first: where Squid's cache.log ends, so that
// waitReloaded reads only what the reload writes, and whether a password file is in force to be backed up.
func (r *reconfiguration) beforeSwap(ctx context.Context, dom libvirt.Domain) (mark int64, hadHtpasswd bool, err error) {
	err = r.c.do(ctx, func(l api) error {
		var err error
		if mark, err = guestFileSize(l, dom, proxyconf.CacheLogPath); err != nil {
			return err
		}
		hadHtpasswd, err = guestFileExists(l, dom, proxyconf.HtpasswdPath)
		return err
	})
	return mark, hadHtpasswd, err
}

// backUp copies the files in force aside, to put back should Squid not take the new ones: then the guest's
// disk says what Squid runs, and the next attempt sees a change still to make. Each backup is the file in
// force and its copy.
func (r *reconfiguration) backUp(ctx context.Context, dom libvirt.Domain, hadHtpasswd bool) ([][2]string, error) {
	backups := [][2]string{{proxyconf.ConfPath, confOld}}
	if r.htpasswd != nil && hadHtpasswd {
		backups = append(backups, [2]string{proxyconf.HtpasswdPath, htpasswdOld})
	}
	for _, bk := range backups {
		if err := r.mustRun(ctx, dom, "/bin/cp", "-p", bk[0], bk[1]); err != nil {
			return nil, err
		}
	}
	return backups, nil
}

// renameTemps moves the new files into place. The password file goes first: the config that names it comes
// after, and an old config that already used authentication checks the new password from here on.
func (r *reconfiguration) renameTemps(ctx context.Context, dom libvirt.Domain) error {
	if r.htpasswd != nil {
		if err := r.mustRun(ctx, dom, "/bin/mv", "-f", htpasswdNew, proxyconf.HtpasswdPath); err != nil {
			return err
		}
	}
	return r.mustRun(ctx, dom, "/bin/mv", "-f", confNew, proxyconf.ConfPath)
}

// restore puts the backed-up files back after a failed swap and returns err.
func (r *reconfiguration) restore(ctx context.Context, dom libvirt.Domain, backups [][2]string, err error) error {
	for _, bk := range backups {
		_, _ = r.run(ctx, dom, "/bin/mv", "-f", bk[1], bk[0]) // best effort: the error reported is err
	}
	return err
}

// dropBackups removes the copies once Squid took the new files (best effort: a leftover copy is overwritten
// next time and never read).
func (r *reconfiguration) dropBackups(ctx context.Context, dom libvirt.Domain, backups [][2]string) {
	olds := []string{"/bin/rm", "-f"}
	for _, bk := range backups {
		olds = append(olds, bk[1])
	}
	_, _ = r.run(ctx, dom, olds...)
}

// syncBackstop installs and loads the new backstop when the guest's differs. The one in force stays loaded
// until the new one passed `nft -c` and loaded, and the kernel swaps the table in one transaction; should the
// load fail, the old file comes back (and is loaded again), so that the guest's disk says what is in force.
func (r *reconfiguration) syncBackstop(ctx context.Context, dom libvirt.Domain) error {
	load := []string{"/bin/sh", vmguest.PrestartPath, vmguest.PrestartBackstop}
	var current []byte
	var hadOld bool
	if err := r.c.do(ctx, func(l api) error {
		var err error
		current, err = guestReadFile(l, dom, proxyconf.NftablesPath)
		hadOld = err == nil
		return retryableOnly(err)
	}); err != nil {
		return err
	}
	if hadOld && bytes.Equal(current, r.backstop) {
		if !r.backstopPending {
			return nil
		}
		// An earlier attempt lost the answer to its rename or its load: the file is current, its load unsure.
		if err := r.mustRun(ctx, dom, load...); err != nil {
			return refusal(err, "the guest did not load the new backstop")
		}
		r.backstopPending = false
		return nil
	}
	if err := r.c.do(ctx, func(l api) error { return guestWriteFile(l, dom, backstopNew, r.backstop) }); err != nil {
		return err
	}
	temps := []string{"/bin/rm", "-f", backstopNew, backstopOld}
	abandon := func(err error) error {
		_, _ = r.run(ctx, dom, temps...) // best effort, as installInGuest's: never read by anything
		return err
	}
	steps := [][]string{
		{"/bin/chown", "root:proxy", backstopNew},
		{"/bin/chmod", "0640", backstopNew},
	}
	for _, argv := range steps {
		if err := r.mustRun(ctx, dom, argv...); err != nil {
			return abandon(err)
		}
	}
	if err := r.mustRun(ctx, dom, nftBin, "-c", "-f", backstopNew); err != nil {
		return abandon(refusal(err, "nft in the guest refused the new backstop"))
	}
	if hadOld {
		if err := r.mustRun(ctx, dom, "/bin/cp", "-p", proxyconf.NftablesPath, backstopOld); err != nil {
			return abandon(err)
		}
	}
	r.backstopPending = true
	r.guestChanged = true
	if err := r.mustRun(ctx, dom, "/bin/mv", "-f", backstopNew, proxyconf.NftablesPath); err != nil {
		return abandon(err)
	}
	if err := r.mustRun(ctx, dom, load...); err != nil {
		if hadOld {
			_, _ = r.run(ctx, dom, "/bin/mv", "-f", backstopOld, proxyconf.NftablesPath) // best effort: err says what failed
			_, _ = r.run(ctx, dom, load...)
		}
		return abandon(refusal(err, "the guest did not load the new backstop"))
	}
	r.backstopPending = false
	_, _ = r.run(ctx, dom, "/bin/rm", "-f", backstopOld) // best effort: a leftover copy is never read
	return nil
}

// reloadCommand is how Squid takes new files: a reload, or a restart that also forgets checked logins.
func reloadCommand(restart bool) []string {
	if restart {
		return []string{"/bin/systemctl", "restart", "squid.service"}
	}
	return []string{squidBin, "-k", "reconfigure"}
}

// reloadAgain makes Squid take the files an earlier attempt put in place, when that attempt lost the answer
// to its rename or reload: the files are current, Squid's running config may not be.
func (r *reconfiguration) reloadAgain(ctx context.Context, dom libvirt.Domain) error {
	var mark int64
	if err := r.c.do(ctx, func(l api) (err error) {
		mark, err = guestFileSize(l, dom, proxyconf.CacheLogPath)
		return err
	}); err != nil {
		return err
	}
	release := r.hold(ctx, dom)
	if err := r.mustRun(ctx, dom, r.pendingReload...); err != nil {
		_ = release()
		return err
	}
	if err := r.waitReloaded(ctx, dom, mark); err != nil {
		_ = release()
		return err
	}
	if err := release(); err != nil {
		return err
	}
	r.pendingReload = nil
	return nil
}

// hold holds new connections to the proxy port while Squid reloads, and marks the reload for the VRRP track
// script (guest.ReloadHold), then waits for Squid to accept the connections made before (guest.ReloadDrain),
// so that no client is refused or reset and no virtual address moves for a reload. It returns what ends the
// hold, which the caller runs whatever the reload did, within a bound of its own should ctx have ended. After
// a successful reload a release that failed (its call cut) is the attempt's error: otherwise the Reconfigure
// would succeed with new connections still dropped, until the hold ends by itself after
// guest.ReloadHoldSeconds; the retry holds, reloads and releases again. After a failed reload the release is
// best effort. A hold that cannot be set is a note, not an error: the reload goes on as it would without one.
func (r *reconfiguration) hold(ctx context.Context, dom libvirt.Domain) (release func() error) {
	port := r.settings.Port
	if port == 0 {
		port = proxyconf.DefaultPort
	}
	held := true
	for _, argv := range guest.ReloadHold(port) {
		if err := r.mustRun(ctx, dom, argv...); err != nil {
			r.note("new connections were not held while Squid reloaded (clients connecting then were refused): %v", err)
			held = false
			break
		}
	}
	if held {
		if err := r.mustRun(ctx, dom, guest.ReloadDrain(port)...); err != nil {
			r.note("connections made before the hold still waited for Squid to accept them when it reloaded (the reload may have reset them): %v", err)
		}
	}
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseLimit)
		defer cancel()
		for _, argv := range guest.ReloadRelease() {
			if err := r.mustRun(rctx, dom, argv...); err != nil {
				return fmt.Errorf("ending the hold of new connections after Squid's reload: %w", err)
			}
		}
		return nil
	}
}

// releaseLimit bounds the release of a hold.
const releaseLimit = 30 * time.Second

// refusal makes a failed check in the guest Permanent, with what it means. A check that did not get to run
// (the connection broke, the agent did not answer) says nothing about the config: it stays retryable.
func refusal(err error, what string) error {
	if backend.Retryable(classify("", err)) {
		return err
	}
	return backend.NewError(backend.ClassPermanent, "", fmt.Errorf("%s: %w", what, err))
}

// run runs argv in the guest and returns how it ended.
func (r *reconfiguration) run(ctx context.Context, dom libvirt.Domain, argv ...string) (execResult, error) {
	return guestExec(ctx, r.c, dom, argv[0], argv[1:]...)
}

// mustRun runs argv in the guest and makes a non-zero exit an error carrying the program's output.
func (r *reconfiguration) mustRun(ctx context.Context, dom libvirt.Domain, argv ...string) error {
	res, err := r.run(ctx, dom, argv...)
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		out := strings.TrimSpace(res.stderr + "\n" + res.stdout)
		return backend.NewError(backend.ClassPermanent, "", fmt.Errorf("%s exited with status %d: %s", strings.Join(argv, " "), res.exitCode, out))
	}
	return nil
}

// waitReloaded waits until Squid's cache.log, past mark, says the listening ports are open again.
func (r *reconfiguration) waitReloaded(ctx context.Context, dom libvirt.Domain, mark int64) error {
	wctx, cancel := context.WithTimeout(ctx, reloadWait)
	defer cancel()
	err := backend.Poll(wctx, execStatusInterval, func(ctx context.Context) (bool, error) {
		var tail []byte
		err := r.c.do(ctx, func(l api) error {
			var err error
			tail, err = guestReadFileFrom(l, dom, proxyconf.CacheLogPath, mark)
			return err
		})
		if err != nil {
			return false, classify("", err)
		}
		return bytes.Contains(tail, []byte(reloadedMarker)), nil
	})
	if err != nil && ctx.Err() == nil {
		return backend.Transient("", "squid did not report reloading its config within %s (no %q in %s): %v", reloadWait, reloadedMarker, proxyconf.CacheLogPath, err)
	}
	return err
}

// confirmHealth asks the proxy's health endpoint, as Create's readiness check does, from where the provider
// runs. An address that proves unreachable from here leaves the confirmation to Squid's own log (waited for
// above) and says so in a note.
func (r *reconfiguration) confirmHealth(ctx context.Context, dom libvirt.Domain, m metadata) error {
	inst := m.instance(r.id.Target, backend.StateRunning)
	if err := r.c.do(ctx, func(l api) error { addressFromHost(l, dom, m, &inst); return nil }); err != nil {
		return err
	}
	rd := r.b.readiness
	host := inst.InternalAddress
	if ip := net.ParseIP(host); host == "" || (!m.Placement.UserNet && rd.attached != nil && ip != nil && !rd.attached(ip)) {
		r.note("the proxy's health endpoint was not asked: its address %q is on no network this machine is attached to; Squid's log in the guest confirmed the reload", host)
		return nil
	}
	start := time.Now()
	var last error
	err := backend.Poll(ctx, execStatusInterval, func(ctx context.Context) (bool, error) {
		var res probeResult
		if m.Placement.UserNet {
			res, last = rd.probeForward(ctx, host, m.Placement.ForwardPort)
		} else {
			res, last = rd.probeProxy(ctx, host, inst.Port)
		}
		switch {
		case res == probeReady:
			return true, nil
		case res == probeUnreachable && time.Since(start) >= rd.unreachableAfter:
			return true, errUnreachable
		}
		return false, backend.NewError(backend.ClassTransient, "", last)
	})
	if errors.Is(err, errUnreachable) {
		r.note("the proxy's health endpoint at %s is not reachable from where the provider runs (%v); Squid's log in the guest confirmed the reload", host, last)
		return nil
	}
	if err != nil {
		return fmt.Errorf("waiting for the proxy's health endpoint at %s after reconfiguring: %w", net.JoinHostPort(host, strconv.Itoa(rd.healthPort)), err)
	}
	return nil
}

// errUnreachable ends the health poll early; it never leaves confirmHealth.
var errUnreachable = backend.Permanent("", "unreachable from here")

func (r *reconfiguration) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	if !slices.Contains(r.notes, n) {
		r.notes = append(r.notes, n)
	}
}
