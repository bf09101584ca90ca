package kvm

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

func renderBackstop(t *testing.T, s proxyconf.Settings) []byte {
	t.Helper()
	b, err := proxyconf.RenderNftables(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A change of allowed_private_cidrs changes the backstop below Squid as well: the new ruleset is checked,
// put in place and loaded before Squid takes the new config; settings that leave it alone never touch it.
func TestFakeReconfigureBackstop(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-backstop")
	if _, loaded := x.guestBackstop(); !bytes.Equal(loaded, renderBackstop(t, x.spec.Proxy)) {
		t.Fatalf("the booted guest's backstop is not the one its seed carries")
	}

	// Lists only: the backstop stays as it is, and no program touches it.
	lists := x.spec.Proxy
	lists.AllowedDestinations = []string{"denied.test"}
	if _, err := x.b.Reconfigure(context.Background(), x.id, lists); err != nil {
		t.Fatal(err)
	}
	for _, argv := range x.agent().ran {
		if slices.Contains(argv, backstopNew) || slices.Contains(argv, vmguest.PrestartBackstop) {
			t.Errorf("a change of lists ran %q", argv)
		}
	}

	// A private range allowed: the new backstop is checked, moved in and loaded, then Squid reloads.
	private := lists
	private.AllowedPrivateCIDRs = []string{"10.1.0.0/16"}
	ranBefore := len(x.agent().ran)
	if _, err := x.b.Reconfigure(context.Background(), x.id, private); err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, argv := range x.agent().ran[ranBefore:] {
		ran = append(ran, strings.Join(argv, " "))
	}
	load := "/bin/sh " + vmguest.PrestartPath + " " + vmguest.PrestartBackstop
	want := []string{
		"/bin/chown root:proxy " + backstopNew,
		"/bin/chmod 0640 " + backstopNew,
		nftBin + " -c -f " + backstopNew,
		"/bin/cp -p " + proxyconf.NftablesPath + " " + backstopOld,
		"/bin/mv -f " + backstopNew + " " + proxyconf.NftablesPath,
		load,
		"/bin/rm -f " + backstopOld,
	}
	if len(ran) < len(want) || !slices.Equal(ran[:len(want)], want) || !slices.Contains(ran, squidBin+" -k reconfigure") {
		t.Errorf("programs run:\n%s\nwant first:\n%s\nthen Squid's reload", strings.Join(ran, "\n"), strings.Join(want, "\n"))
	}
	onDisk, loaded := x.guestBackstop()
	if wantB := renderBackstop(t, private); !bytes.Equal(onDisk, wantB) || !bytes.Equal(loaded, wantB) {
		t.Errorf("the guest's backstop (on disk %d bytes, loaded %d bytes) is not the new one", len(onDisk), len(loaded))
	}
	if files, _ := x.seedFiles(t); !bytes.Equal(files[proxyconf.NftablesPath], renderBackstop(t, private)) {
		t.Errorf("the seed's user-data does not carry the new backstop")
	}

	// The same again: nothing runs.
	ranBefore = len(x.agent().ran)
	if _, err := x.b.Reconfigure(context.Background(), x.id, private); err != nil {
		t.Fatal(err)
	}
	if n := len(x.agent().ran) - ranBefore; n != 0 {
		t.Errorf("a repeated Reconfigure ran %d programs", n)
	}
}

// nft refusing the new ruleset is Permanent, and leaves the old backstop on disk and loaded, and Squid's
// config as it was.
func TestFakeReconfigureBackstopRefused(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, uuid.NewString())
	a := x.agent()
	x.f.mu.Lock()
	a.backstopRefused = true
	x.f.mu.Unlock()
	next := x.spec.Proxy
	next.AllowedPrivateCIDRs = []string{"10.1.0.0/16"}
	_, err := x.b.Reconfigure(context.Background(), x.id, next)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "refused the new backstop") {
		t.Fatalf("Reconfigure with nft refusing the ruleset = %v, want Permanent: refused the new backstop", err)
	}
	old := renderBackstop(t, x.spec.Proxy)
	if onDisk, loaded := x.guestBackstop(); !bytes.Equal(onDisk, old) || !bytes.Equal(loaded, old) {
		t.Errorf("the old backstop is not on disk and loaded after a refusal")
	}
	if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, x.spec.Proxy)) {
		t.Errorf("Squid does not run the old config after the backstop was refused")
	}
	for _, p := range []string{backstopNew, backstopOld} {
		if _, _, ok := x.guest(p); ok {
			t.Errorf("%s left in the guest", p)
		}
	}
}

// An answer lost on the way (the rename's, the load's) makes the retried attempt load the backstop, though
// the file on disk is already the new one.
func TestFakeReconfigureBackstopSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	for name, lost := range map[string]string{
		"the rename": "/bin/mv -f " + backstopNew,
		"the load":   "/bin/sh " + vmguest.PrestartPath,
		"the check":  nftBin + " -c",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newReconfFixture(t, uuid.NewString())
			a := x.agent()
			x.f.mu.Lock()
			a.loseAnswerOf = lost
			x.f.mu.Unlock()
			next := x.spec.Proxy
			next.AllowedPrivateCIDRs = []string{"10.1.0.0/16"}
			if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
				t.Fatalf("Reconfigure after a lost answer to %s: %v", lost, err)
			}
			x.f.mu.Lock()
			notLost := a.loseAnswerOf
			x.f.mu.Unlock()
			if notLost != "" {
				t.Fatalf("no answer to %q was lost: the test proves nothing", notLost)
			}
			want := renderBackstop(t, next)
			if onDisk, loaded := x.guestBackstop(); !bytes.Equal(onDisk, want) || !bytes.Equal(loaded, want) {
				t.Errorf("the new backstop is not on disk and loaded (on disk %d bytes, loaded %d bytes)", len(onDisk), len(loaded))
			}
		})
	}
}

// guestBackstop returns the guest's backstop file and the ruleset its kernel holds (nil for none).
func (x *reconfFixture) guestBackstop() (onDisk, loaded []byte) {
	a := x.agent()
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	return bytes.Clone(a.files[proxyconf.NftablesPath]), bytes.Clone(a.backstopLoaded)
}
