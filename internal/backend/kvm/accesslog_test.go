package kvm

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
)

// TestFakeUpdateSyslogTarget: the access log's syslog target changes in place through the guest agent, both
// ways: the guest's rsyslog runs the drop-in rendered for it, the seed carries the same for a rebuild, and Get
// reads the target back from the domain's metadata. The same target twice runs nothing in the guest; a
// drop-in rsyslog refuses leaves the one in force, and the metadata as it was.
func TestFakeUpdateSyslogTarget(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "update-syslog")
	update := func(target string) error {
		spec := x.spec
		spec.Placement.Options = &Options{SyslogTarget: target}
		_, err := x.b.Update(context.Background(), x.id, spec)
		return err
	}
	journalOnly := guest.RenderAccessLog(nil)
	if onDisk, _, _ := x.guest(guest.RsyslogConfPath); !bytes.Equal(onDisk, journalOnly) {
		t.Fatalf("a new proxy's guest has access log drop-in %q, want the journal only", onDisk)
	}
	for _, target := range []string{"udp://198.18.0.1:5514", "tcp://logs.example.test:6514", ""} {
		if err := update(target); err != nil {
			t.Fatalf("Update to %q: %v", target, err)
		}
		parsed, _ := syslogTargetOf(target)
		want := guest.RenderAccessLog(parsed)
		a := x.agent()
		x.f.mu.Lock()
		onDisk, loaded, ran := a.files[guest.RsyslogConfPath], a.rsyslogLoaded, len(a.ran)
		x.f.mu.Unlock()
		if _, _, left := x.guest(rsyslogCheck); left {
			t.Errorf("to %q: the check configuration was left in the guest", target)
		}
		if !bytes.Equal(onDisk, want) || !bytes.Equal(loaded, want) {
			t.Errorf("to %q: the guest has\n%s\nand rsyslog runs\n%s\nwant\n%s", target, onDisk, loaded, want)
		}
		if files, m := x.seedFiles(t); !bytes.Equal(files[guest.RsyslogConfPath], want) || m.Placement.SyslogTarget != target {
			t.Errorf("to %q: the seed carries target %q and drop-in\n%s", target, m.Placement.SyslogTarget, files[guest.RsyslogConfPath])
		}
		got, err := x.b.Get(context.Background(), x.id)
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := got.Placement.Options.(*Options); o == nil || o.SyslogTarget != target {
			t.Errorf("to %q: Get reads back %+v", target, got.Placement.Options)
		}
		if err := update(target); err != nil {
			t.Fatalf("Update to %q again: %v", target, err)
		}
		x.f.mu.Lock()
		again := len(a.ran)
		x.f.mu.Unlock()
		if again != ran {
			t.Errorf("to %q again: ran %v in the guest, want nothing", target, a.ran[ran:])
		}
	}

	x.f.mu.Lock()
	x.booted().rsyslogRefuses = true
	x.f.mu.Unlock()
	err := update("udp://198.18.0.1:5514")
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "rsyslog refused") {
		t.Errorf("Update with a drop-in rsyslog refuses = %v, want Permanent: rsyslog refused", err)
	}
	if onDisk, _, _ := x.guest(guest.RsyslogConfPath); !bytes.Equal(onDisk, journalOnly) {
		t.Errorf("after the refusal the guest has\n%s\nwant the drop-in in force before", onDisk)
	}
	for _, leftover := range []string{rsyslogNew, rsyslogCheck} {
		if _, _, ok := x.guest(leftover); ok {
			t.Errorf("the refused drop-in's check left %s in the guest", leftover)
		}
	}
	if got, err := x.b.Get(context.Background(), x.id); err != nil || optionsOf(got.Placement).SyslogTarget != "" {
		t.Errorf("after the refusal Get reads target %+v (%v), want none", got.Placement.Options, err)
	}
}

// TestSyslogTargetRefusedAtCreate: a target ValidateSyslogTarget refuses fails Create as Permanent before
// anything is made.
func TestSyslogTargetRefusedAtCreate(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := readySpec(f, "bad-syslog", "198.18.0.61")
	optionsOf(spec.Placement).SyslogTarget = "http://logs.example.test:514"
	_, err := b.Create(context.Background(), spec)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "syslog target") {
		t.Errorf("Create = %v, want Permanent naming the syslog target", err)
	}
	if len(f.domains) != 0 {
		t.Errorf("Create made %d domains", len(f.domains))
	}
}

// TestCreateWithSyslogTarget: a proxy created with a target boots forwarding to it (the seed's drop-in), and
// Get reads the target back.
func TestCreateWithSyslogTarget(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := fakeSpec("made-with-syslog", "o")
	optionsOf(spec.Placement).SyslogTarget = "tcp://198.18.0.1:6514"
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	d := f.domains[spec.Name]
	a := f.agent(spec.Name)
	f.bootFromSeed(d, a)
	onDisk := a.files[guest.RsyslogConfPath]
	f.mu.Unlock()
	want := guest.RenderAccessLog(&guest.SyslogTarget{Protocol: "tcp", Host: "198.18.0.1", Port: 6514})
	if !bytes.Equal(onDisk, want) {
		t.Errorf("the guest booted with drop-in\n%s\nwant\n%s", onDisk, want)
	}
	got, err := b.Get(context.Background(), idOf(spec))
	if err != nil || optionsOf(got.Placement).SyslogTarget != "tcp://198.18.0.1:6514" {
		t.Errorf("Get reads target %q (%v)", optionsOf(got.Placement).SyslogTarget, err)
	}
}
