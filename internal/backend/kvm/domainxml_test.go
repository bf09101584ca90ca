package kvm

import (
	"context"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestDomainXMLInterfaces(t *testing.T) {
	t.Parallel()
	base := Options{VCPUs: 2, MemoryMiB: 384, Pool: "pool", MAC: "52:54:00:aa:bb:cc"}
	tests := map[string]struct {
		mod  func(*Options)
		want []string
	}{
		"network": {func(p *Options) { p.Network = "default" }, []string{`<interface type="network">`, `<source network="default">`}},
		"bridge":  {func(p *Options) { p.Bridge = "br0" }, []string{`<interface type="bridge">`, `<source bridge="br0">`}},
		"user": {func(p *Options) { p.UserNet, p.ForwardAddress, p.ForwardPort = true, "127.0.0.1", 13128 },
			[]string{`<interface type="user">`, `<backend type="passt">`, `<portForward proto="tcp" address="127.0.0.1">`, `<range start="13128" to="3128">`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := placement{Options: base, Host: "h"}
			tc.mod(&p.Options)
			x, err := domainXML("egress-1", p, "qemu", 3128, `<proxy xmlns="`+Namespace+`"><uid>u</uid></proxy>`)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range append(tc.want,
				`<domain type="qemu">`, `<memory unit="MiB">384</memory>`, `<vcpu>2</vcpu>`, `<mac address="52:54:00:aa:bb:cc">`,
				`<source pool="pool" volume="egress-1-root.qcow2">`, `<source pool="pool" volume="egress-1-seed.iso">`,
				`<serial type="pty">`, `org.qemu.guest_agent.0`, `<uid>u</uid>`) {
				if !strings.Contains(x, w) {
					t.Errorf("domain XML lacks %s:\n%s", w, x)
				}
			}
			var d libvirtxml.Domain
			if err := d.Unmarshal(x); err != nil || d.Name != "egress-1" {
				t.Errorf("domain XML does not parse back: %v", err)
			}
		})
	}
}

func TestResolvePlacement(t *testing.T) {
	t.Parallel()
	hosts := map[string]HostConfig{"h": {Pool: "pool", Network: "net", BaseVolume: "base", DomainType: "qemu"}, "b": {Pool: "p", Bridge: "br0", BaseVolume: "base", DomainType: "auto"}}
	spec := func(k *Options, target string) backend.Spec {
		return backend.Spec{Name: "egress-1", UID: "u", Placement: backend.Placement{Backend: Kind, Target: target, Options: k}}
	}
	p, err := resolvePlacement(spec(nil, "h"), hosts)
	if err != nil || p.VCPUs != 1 || p.MemoryMiB != 512 || p.Network != "net" || p.MAC != macFromUID("u") || p.DomainType != "qemu" {
		t.Errorf("defaults = %+v, %v", p, err)
	}
	if p, _ := resolvePlacement(spec(nil, "b"), hosts); p.Bridge != "br0" || p.Network != "" {
		t.Errorf("bridge host default = %+v", p)
	}
	if p, _ := resolvePlacement(spec(&Options{MAC: "52-54-00-AA-BB-CC"}, "h"), hosts); p.MAC != "52:54:00:aa:bb:cc" {
		t.Errorf("mac normalised to %q", p.MAC)
	}
	bad := map[string]backend.Spec{
		"unknown host":    spec(nil, "x"),
		"two interfaces":  spec(&Options{Network: "n", Bridge: "b"}, "h"),
		"bad mac":         spec(&Options{MAC: "zz"}, "h"),
		"bad ip":          spec(&Options{IP: "300.1.1.1"}, "h"),
		"ip on a bridge":  spec(&Options{IP: "10.0.0.1", Bridge: "br0"}, "h"),
		"bad domain type": spec(&Options{DomainType: "xen"}, "h"),
	}
	for name, s := range bad {
		if _, err := resolvePlacement(s, hosts); backend.ClassOf(err) != backend.ClassPermanent {
			t.Errorf("%s: %v, want Permanent", name, err)
		}
	}
}

func TestFakeUserNetWithoutPasstFallsBackToSlirp(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	f.noPasst = true
	b, cnt := fakeBackend(f)
	ctx := context.Background()
	for i, uid := range []string{"slirp-1", "slirp-2"} {
		spec := fakeSpec(uid, "o")
		optionsOf(spec.Placement).UserNet, optionsOf(spec.Placement).ForwardAddress, optionsOf(spec.Placement).ForwardPort = true, "127.0.0.1", 18080
		if _, err := b.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		var dx libvirtxml.Domain
		if err := dx.Unmarshal(f.domains[spec.Name].xml); err != nil {
			t.Fatal(err)
		}
		if len(dx.Devices.Interfaces) != 0 || dx.QEMUCommandline == nil || len(dx.QEMUCommandline.Args) != 4 {
			t.Fatalf("domain XML: interfaces %+v, qemu args %+v; want QEMU's user network instead", dx.Devices.Interfaces, dx.QEMUCommandline)
		}
		want := "user,id=egressnet0,hostfwd=tcp:127.0.0.1:18080-:3128"
		if got := dx.QEMUCommandline.Args[1].Value; got != want {
			t.Errorf("netdev = %s, want %s", got, want)
		}
		if got := dx.QEMUCommandline.Args[3].Value; !strings.Contains(got, "mac="+macFromUID(uid)) {
			t.Errorf("device = %s, want the proxy's MAC", got)
		}
		// The refusal is learnt once per host: the second proxy is defined at the first try.
		if _, per := cnt.take(); per["DomainDefineXMLFlags"] != 2-i {
			t.Errorf("proxy %d: %d defines, want %d", i, per["DomainDefineXMLFlags"], 2-i)
		}
	}
}
