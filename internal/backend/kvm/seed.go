package kvm

import (
	"fmt"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// NoCloud seed disk: cloud-init finds it by its volume label and reads user-data and meta-data from it.
const (
	seedLabel = "cidata"
	// identityFile carries the proxy's metadata element on the seed too. A seed volume left without its domain
	// (a crashed create, a domain undefined behind Terraform's back) thereby still says whose it is, so
	// ListByTag can report it to its owner and Create can tell a stale leftover of its own from another's.
	identityFile = "egress-proxy.xml"
	// seedReadLimit bounds how much of a seed volume is downloaded to read its identity.
	seedReadLimit = 1 << 20
)

// seedImage renders the proxy's seed ISO in memory: nothing touches a local disk, so it works the same on a
// remote host.
func seedImage(spec backend.Spec, m metadata, at time.Time) ([]byte, error) {
	target, err := syslogTargetOf(m.Placement.SyslogTarget)
	if err != nil {
		return nil, err
	}
	vrrp, err := m.HA.vrrp(0)
	if err != nil {
		return nil, err
	}
	userData, err := guest.RenderUserDataFor(spec.Proxy, vmguest.RenderOptions(), target, vrrp)
	if err != nil {
		return nil, fmt.Errorf("rendering user-data: %w", err)
	}
	metaData, err := guest.RenderMetaData(spec.UID, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("rendering meta-data: %w", err)
	}
	identity, err := m.marshal()
	if err != nil {
		return nil, err
	}
	return iso9660.Build(seedLabel, map[string][]byte{
		"user-data":  userData,
		"meta-data":  metaData,
		identityFile: []byte(identity),
	}, at)
}

// seedIdentity reads the metadata back from a seed image.
func seedIdentity(img []byte) (metadata, error) {
	b, err := iso9660.ReadFile(img, identityFile)
	if err != nil {
		return metadata{}, err
	}
	return parseMetadata(string(b))
}
