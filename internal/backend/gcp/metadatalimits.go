package gcp

import (
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Compute Engine's limits on an instance's metadata ("Setting custom metadata", Limitations, and the
// discovery document's Metadata.items): each value at most 256 KiB, all keys and values together less than
// 512 KB. The proxy's settings decide most of it (squid.conf and the stored spec both grow with the
// allow-lists; the TLS certificate chain has a key of its own), so a configuration can break them.
const (
	MaxMetadataValueBytes = 256 * 1024
	MaxMetadataTotalBytes = 512 * 1024
)

// MetadataLimitError says which limit a proxy's metadata would break.
type MetadataLimitError struct {
	// Key is the metadata key whose value is over its limit; empty when the total is.
	Key         string
	Size, Limit int
	// TLS says the TLS certificate chain and key weigh more in what is over the limit than the proxy's rules.
	TLS bool
}

func (e *MetadataLimitError) Error() string {
	what := "the rules (allow-lists)"
	if e.TLS {
		what = "the TLS certificate chain"
	}
	if e.Key != "" {
		return fmt.Sprintf("the instance metadata key %s would hold %d bytes and Compute Engine accepts at most %d in one value: shorten %s",
			e.Key, e.Size, e.Limit, what)
	}
	return fmt.Sprintf("the instance metadata would total %d bytes and Compute Engine accepts less than %d: shorten %s",
		e.Size, e.Limit, what)
}

// CheckMetadata renders the metadata a proxy with these settings gets on a VM of this placement (what Create
// writes) and checks it against Compute Engine's limits: the provider calls it at plan time, so that a
// configuration the API would refuse fails there, on the attribute at fault.
func CheckMetadata(settings proxyconf.Settings, g Options) error {
	r, err := renderProxy(settings, storedSpec{Image: g.Image, StaticEgressIP: g.StaticEgressIP, EgressAddressName: g.EgressAddressName}, "")
	if err != nil {
		return err
	}
	// The log's name grows with the instance's: counted at the longest name Compute Engine takes.
	return checkMetadataItems(slices.Concat(r.items(nil), hardeningItems(&g), cloudLoggingItems(&g, strings.Repeat("x", maxResourceName))), r)
}

// checkMetadataItems checks the items a request would send; r tells which part of the settings weighs most.
func checkMetadataItems(items []*computepb.Items, r rendered) error {
	tlsHeavier := len(r.tlsCert)+len(r.tlsKey) > len(r.squidConf)+len(r.spec)
	total := 0
	for _, it := range items {
		n := len(it.GetValue())
		if n > MaxMetadataValueBytes {
			k := it.GetKey()
			tls := k == gcpguest.MetadataTLSCert || k == gcpguest.MetadataTLSKey
			return &MetadataLimitError{Key: k, Size: n, Limit: MaxMetadataValueBytes, TLS: tls}
		}
		total += len(it.GetKey()) + n
	}
	if total >= MaxMetadataTotalBytes {
		return &MetadataLimitError{Size: total, Limit: MaxMetadataTotalBytes, TLS: tlsHeavier}
	}
	return nil
}
