package kvm

import (
	"bytes"
	"context"
	"path"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// Metrics turned on, off or moved reach a running proxy in two steps around the rest of Reconfigure
// (vmguest.MetricsFiles): stopMetrics, before the backstop changes, stops the programs whose files change and
// removes those files, so no metrics port is ever open without the backstop's metrics chain for its ranges;
// startMetrics, once Squid runs the new config (with its cache manager), writes the new files and starts both
// programs. A proxy whose files are current only has its programs checked to be running.

// metricsPaths are the files vmguest.MetricsFiles may write, whether or not the new settings have metrics.
var metricsPaths = vmguest.MetricsPaths

// stopMetrics compares the guest's metrics files with r.metricsFiles; when they differ it stops the programs
// (if the guest had metrics) and removes the files, and startMetrics writes the new ones.
func (r *reconfiguration) stopMetrics(ctx context.Context, dom libvirt.Domain) error {
	want := map[string][]byte{}
	for _, f := range r.metricsFiles {
		want[f.Path] = f.Content
	}
	had, same := false, true
	present := map[string]bool{}
	if err := r.c.do(ctx, func(l api) error {
		for _, p := range metricsPaths {
			have, err := guestReadFile(l, dom, p)
			if err != nil {
				if err := retryableOnly(err); err != nil {
					return err
				}
				have = nil
			} else {
				had = had || p != vmguest.MtailProgramPath
				present[p] = true
			}
			w, ok := want[p]
			if (err == nil) != ok || !bytes.Equal(have, w) {
				same = false
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if same {
		return nil
	}
	r.metricsPending = true
	r.guestChanged = true
	if had {
		// Unit names the image or the packages know; a guest without them has no drop-in of ours either.
		if err := r.mustRun(ctx, dom, append([]string{"/bin/systemctl", "disable", "--now"}, metricsUnitsPresent(present)...)...); err != nil {
			return err
		}
	}
	return r.mustRun(ctx, dom, append([]string{"/bin/rm", "-f"}, metricsPaths...)...)
}

// metricsUnitsPresent are vmguest.MetricsUnits but those of ours whose unit file is not among present:
// systemctl refuses to disable a unit it cannot find, and a guest whose metrics began before that unit did
// has none.
func metricsUnitsPresent(present map[string]bool) []string {
	var units []string
	for _, u := range vmguest.MetricsUnits {
		if path, ours := vmguest.MetricsOwnUnits[u]; ours && !present[path] {
			continue
		}
		units = append(units, u)
	}
	return units
}

// startMetrics writes the metrics files and (re)starts the programs after stopMetrics removed the old ones,
// or checks they run when the files were current. Without metrics it only has systemd forget the removed
// drop-ins.
func (r *reconfiguration) startMetrics(ctx context.Context, dom libvirt.Domain) error {
	if len(r.metricsFiles) == 0 {
		if r.metricsPending {
			if err := r.mustRun(ctx, dom, "/bin/systemctl", "daemon-reload"); err != nil {
				return err
			}
			r.metricsPending = false
		}
		return nil
	}
	if !r.metricsPending {
		res, err := r.run(ctx, dom, append([]string{"/bin/systemctl", "is-active", "--quiet"}, vmguest.MetricsUnits...)...)
		if err != nil || res.exitCode == 0 {
			return err
		}
	}
	dirs := []string{"/bin/mkdir", "-p"}
	for _, f := range r.metricsFiles {
		dirs = append(dirs, path.Dir(f.Path))
	}
	if err := r.mustRun(ctx, dom, dirs...); err != nil {
		return err
	}
	if err := r.c.do(ctx, func(l api) error {
		for _, f := range r.metricsFiles {
			if err := guestWriteFile(l, dom, f.Path, f.Content); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	files := make([]string, 0, len(r.metricsFiles))
	for _, f := range r.metricsFiles {
		files = append(files, f.Path)
	}
	for _, argv := range [][]string{
		append([]string{"/bin/chown", "root:root"}, files...),
		append([]string{"/bin/chmod", "0644"}, files...),
		{"/bin/systemctl", "daemon-reload"},
		{"/bin/sh", "-c", vmguest.MetricsIfMissing},
	} {
		if err := r.mustRun(ctx, dom, argv...); err != nil {
			return refusal(err, "the guest did not start the metrics programs")
		}
	}
	r.metricsPending = false
	return nil
}
