package gcp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// largestSettings are settings with every list at its limit and every entry at its longest, and a TLS
// certificate chain and key of the largest size accepted: the most metadata a configuration can make.
func largestSettings(t testing.TB) proxyconf.Settings {
	t.Helper()
	s := proxyconf.Settings{Port: 3128, Users: []proxyconf.BasicAuth{{Username: strings.Repeat("u", 64), Password: "correct-horse-battery"}}}
	for i := range proxyconf.MaxAllowedDestinations {
		// 253 characters: four labels of 63, 63, 63 and 61.
		s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf(".d%03d%s.%s.%s.%s", i, strings.Repeat("a", 59), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("e", 61)))
	}
	for i := range proxyconf.MaxAllowedClientCIDRs {
		s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789a:%04x/128", 0xb000+i))
	}
	for i := range proxyconf.MaxAllowedPrivateCIDRs {
		s.AllowedPrivateCIDRs = append(s.AllowedPrivateCIDRs, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789b:%04x/128", 0xc000+i))
	}
	for i := range proxyconf.MaxAllowedPorts {
		s.AllowedPorts = append(s.AllowedPorts, 60000+i)
	}
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	chain := cert
	for {
		more, _ := testutil.SelfSignedPEM(t, "ca.test")
		if len(chain)+len(more) > 16*1024 {
			break
		}
		chain += more
	}
	s.TLS = &proxyconf.TLSSettings{CertificatePEM: chain, PrivateKeyPEM: key}
	if err := s.Validate(); err != nil {
		t.Fatalf("the largest settings are not valid settings: %v", err)
	}
	return s
}

// Every input at its limit still fits Compute Engine's metadata limits, with room: the plan-time check
// (CheckMetadata) guards against a change of those input limits, and passes every configuration today.
// The largest policy (rule sets, the deny list, users, a client CA and CRL, each at its limit) fits too: its
// rule sets are in squid.conf and in the stored spec, the CA in a key of its own.
func TestLargestSettingsFitMetadata(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]proxyconf.Settings{"largest lists": largestSettings(t), "largest policy": proxyconftest.LargestPolicySettings(t)} {
		// Cloud logging on: its key, with the longest log name, counts too.
		g := Options{Image: DefaultImage, StaticEgressIP: true, ServiceAccount: "proxy@p.iam.gserviceaccount.com", CloudLogging: true}
		if err := CheckMetadata(s, g); err != nil {
			t.Fatalf("%s: the largest settings do not fit: %v", name, err)
		}
		r, err := renderProxy(s, storedSpec{Image: g.Image, StaticEgressIP: true}, "")
		if err != nil {
			t.Fatal(err)
		}
		total, largest, largestKey := 0, 0, ""
		for _, it := range slices.Concat(r.items(nil), hardeningItems(&g), cloudLoggingItems(&g, strings.Repeat("n", maxResourceName))) {
			total += len(it.GetKey()) + len(it.GetValue())
			if n := len(it.GetValue()); n > largest {
				largest, largestKey = n, it.GetKey()
			}
		}
		t.Logf("%s: %d bytes of metadata in all (limit %d), largest value %s %d bytes (limit %d)",
			name, total, MaxMetadataTotalBytes, largestKey, largest, MaxMetadataValueBytes)
		// The largest policy takes about 90% of the metadata and 82% of squid.conf's value (its 32 rule sets
		// each repeat their acl heads): it fits, which is what CheckMetadata proves above, but leaves less
		// room than the lists alone, so only the lists are held to three quarters.
		if name == "largest lists" && (total > MaxMetadataTotalBytes*3/4 || largest > MaxMetadataValueBytes*3/4) {
			t.Errorf("%s: the largest settings use more than three quarters of a limit: the input limits leave too little room", name)
		}
	}
}

// checkMetadataItems refuses what Compute Engine would, and names the part of the settings that weighs most.
func TestCheckMetadataItems(t *testing.T) {
	t.Parallel()
	item := func(k string, n int) *computepb.Items {
		return &computepb.Items{Key: proto.String(k), Value: proto.String(strings.Repeat("x", n))}
	}
	rules := rendered{squidConf: make([]byte, 200_000), spec: make([]byte, 200_000)}
	tls := rendered{squidConf: make([]byte, 1000), tlsCert: make([]byte, 250_000)}
	for name, tc := range map[string]struct {
		items []*computepb.Items
		r     rendered
		want  *MetadataLimitError
	}{
		"at the value limit":      {[]*computepb.Items{item(gcpguest.MetadataSquidConf, MaxMetadataValueBytes)}, rules, nil},
		"squid.conf over a value": {[]*computepb.Items{item(gcpguest.MetadataSquidConf, MaxMetadataValueBytes+1)}, rules, &MetadataLimitError{Key: gcpguest.MetadataSquidConf, Size: MaxMetadataValueBytes + 1, Limit: MaxMetadataValueBytes}},
		"certificate over a value": {[]*computepb.Items{item(gcpguest.MetadataTLSCert, MaxMetadataValueBytes+1)}, tls,
			&MetadataLimitError{Key: gcpguest.MetadataTLSCert, Size: MaxMetadataValueBytes + 1, Limit: MaxMetadataValueBytes, TLS: true}},
		"just under the total": {[]*computepb.Items{item("a", 200_000), item("b", 200_000), item("c", MaxMetadataTotalBytes-400_003-1)}, rules, nil},
		"the total, rules heavier": {[]*computepb.Items{item("a", 200_000), item("b", 200_000), item("c", MaxMetadataTotalBytes-400_003)}, rules,
			&MetadataLimitError{Size: MaxMetadataTotalBytes, Limit: MaxMetadataTotalBytes}},
		"the total, certificate heavier": {[]*computepb.Items{item("a", 200_000), item("b", 200_000), item("c", 200_000)}, tls,
			&MetadataLimitError{Size: 600_003, Limit: MaxMetadataTotalBytes, TLS: true}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := checkMetadataItems(tc.items, tc.r)
			var got *MetadataLimitError
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && (!errors.As(err, &got) || *got != *tc.want):
				t.Fatalf("= %v, want %+v", err, tc.want)
			}
		})
	}
}
