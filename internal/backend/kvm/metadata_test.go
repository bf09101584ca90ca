package kvm

import (
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	spec := backend.Spec{
		Name: "egress-1", UID: "uid-1", Owner: "team-a", Labels: map[string]string{"env": "prod", "app": "x"},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{".example.com"},
			AllowedPorts: []int{443, 8443}, Auth: &proxyconf.BasicAuth{Username: "u", Password: "secret-password"}},
	}
	p := placement{Options: Options{VCPUs: 2, MemoryMiB: 512, DiskGiB: 4, DomainType: "qemu", Pool: "p",
		BaseVolume: "b", Network: "n", MAC: "52:54:00:00:00:01", IP: "198.18.0.9", WaitForAddress: true}, Host: "h"}
	created := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	s, err := newMetadata(spec, p, created).marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `xmlns="`+Namespace+`"`) || strings.Contains(s, "secret-password") {
		t.Fatalf("metadata XML = %s: want the namespace declared and no password", s)
	}

	// libvirt hands the element back in three shapes: as written, without namespace (DomainGetMetadata),
	// and with its own prefix (inside the domain XML).
	forms := map[string]string{
		"as written":  s,
		"no ns":       strings.Replace(s, ` xmlns="`+Namespace+`"`, "", 1),
		"with prefix": strings.NewReplacer("<proxy xmlns=", "<egress:proxy xmlns:egress=", "</proxy>", "</egress:proxy>").Replace(s),
	}
	for name, form := range forms {
		m, err := parseMetadata(form)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inst := m.instance("h", backend.StateRunning)
		if inst.UID != "uid-1" || inst.Owner != "team-a" || inst.Name != "egress-1" || !inst.CreatedAt.Equal(created) ||
			inst.Labels["env"] != "prod" || inst.Labels["app"] != "x" || inst.ID.String() != "kvm/h/egress-1" {
			t.Errorf("%s: instance = %+v", name, inst)
		}
		if k := optionsOf(inst.Placement); k == nil || k.VCPUs != 2 || k.IP != "198.18.0.9" || k.MAC != "52:54:00:00:00:01" || !k.WaitForAddress {
			t.Errorf("%s: placement = %+v", name, optionsOf(inst.Placement))
		}
		if inst.InternalAddress != "198.18.0.9" {
			t.Errorf("%s: address = %q, want the fixed IP", name, inst.InternalAddress)
		}
		if px := inst.Proxy; px == nil || px.Auth == nil || px.Auth.Username != "u" || px.Auth.Password != "" || len(px.AllowedPorts) != 2 {
			t.Errorf("%s: proxy = %+v", name, inst.Proxy)
		}
		if !m.managedBy("team-a") || m.managedBy("team-b") || !m.managedBy("") {
			t.Errorf("%s: managedBy wrong", name)
		}
	}
}
