package aws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// proxyParameters are the parameters under the proxy's path, by their name below it.
func proxyParameters(fake *ec2fake.Server, name string) map[string]ec2fake.Parameter {
	out := map[string]ec2fake.Parameter{}
	for _, p := range fake.Parameters(testRegion) {
		if rest, ok := strings.CutPrefix(p.Name, guest.ParameterPath(name, "")); ok {
			out[rest] = p
		}
	}
	return out
}

// loadConfig reads the proxy's config as its guest would, over the wire.
func loadConfig(t *testing.T, fake *ec2fake.Server, name string) (guest.Config, guest.ConfigFormat) {
	t.Helper()
	c := ssm.NewFromConfig(fake.AdminAWSConfig(testRegion))
	values := map[string]string{}
	names := guest.ParameterPaths(name)
	for len(names) > 0 {
		batch := names[:min(len(names), 10)]
		names = names[len(batch):]
		out, err := c.GetParameters(t.Context(), &ssm.GetParametersInput{Names: batch})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range out.Parameters {
			values[awssdk.ToString(p.Name)] = awssdk.ToString(p.Value)
		}
	}
	config, format, err := guest.LoadConfig(values[guest.ParameterPath(name, guest.ParameterConfig)], func(i int) (string, bool) {
		v, ok := values[guest.ParameterPath(name, guest.PartName(guest.ParameterConfig, i))]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the config as the guest reads it: %v", err)
	}
	return config, format
}

// A typical proxy (ten destinations) keeps every parameter in SSM's Standard tier, which is free: its config
// is one part beside a small manifest (issue 35, item 7: before, its config parameter was over 4 KB before a
// single destination, and every proxy paid for an Advanced one). The guest applies it and Get reads it back
// without drift.
func TestTypicalProxyIsStandard(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "typical")
	spec.Placement.Options.(*Options).WaitForProxy = true //nolint:forcetypeassert // testSpec's own options
	spec.Proxy.AllowedDestinations = nil
	for i := range 10 {
		spec.Proxy.AllowedDestinations = append(spec.Proxy.AllowedDestinations, fmt.Sprintf("api%02d.example%02d.com", i, i))
	}
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	params := proxyParameters(fake, spec.Name)
	for name, p := range params {
		if p.Tier != "Standard" {
			t.Errorf("parameter %s is %s (%d characters), want Standard", name, p.Tier, len(p.Value))
		}
	}
	for _, want := range []string{"settings", "settings-1", "config", "config-1", "secrets", "applied"} {
		if _, ok := params[want]; !ok {
			t.Errorf("no parameter %s; the proxy has %v", want, slices.Sorted(func(yield func(string) bool) {
				for k := range params {
					if !yield(k) {
						return
					}
				}
			}))
		}
	}
	if _, ok := params["config-2"]; ok {
		t.Error("a typical config takes a second part")
	}
	if c, format := loadConfig(t, fake, spec.Name); format != guest.FormatParts || !strings.Contains(c.SquidConf, "api09.example09.com") {
		t.Errorf("the config as the guest reads it: format %d, squid.conf without the last destination", format)
	}
	got, err := b.Get(t.Context(), inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Drift != "" || got.Proxy == nil || !slices.Equal(got.Proxy.AllowedDestinations, spec.Proxy.AllowedDestinations) {
		t.Errorf("Get = drift %q, settings %+v; want the ten destinations read back and no drift", got.Drift, got.Proxy)
	}
}

// largestSettings are the largest the schema admits: every list at its limit, every entry of the longest
// form, proxyconf.MaxUsers users with names of 64 characters and passwords of 72, a TLS certificate chain of 16 KB. names makes the
// destinations.
func largestSettings(t *testing.T, names func(i int) string) proxyconf.Settings {
	t.Helper()
	s := proxyconf.Settings{Port: 3128}
	for i := range proxyconf.MaxUsers {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: fmt.Sprintf("%02d%s", i, strings.Repeat("u", 62)), Password: strings.Repeat("p", 72)})
	}
	for i := range proxyconf.MaxAllowedDestinations {
		s.AllowedDestinations = append(s.AllowedDestinations, names(i))
	}
	// IPv4 ranges of the longest form (the fake models no IPv6 rule in a security group).
	for i := range proxyconf.MaxAllowedClientCIDRs {
		s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, fmt.Sprintf("198.151.%d.%d/32", 100+i/100, 100+i%100))
	}
	for i := range proxyconf.MaxAllowedPrivateCIDRs {
		s.AllowedPrivateCIDRs = append(s.AllowedPrivateCIDRs, fmt.Sprintf("fd12:3456:789a:bcde:f012:3456:789b:%04x/128", 0xc000+i))
	}
	for i := range proxyconf.MaxAllowedPorts {
		s.AllowedPorts = append(s.AllowedPorts, 60000+i)
	}
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	for {
		more, _ := testutil.SelfSignedPEM(t, "ca.test")
		if len(cert)+len(more) > proxyconf.MaxPEMBytes {
			break
		}
		cert += more
	}
	s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// longestDestination is destination i of the longest form the schema admits: a leading dot and 253
// characters in four labels, as a generated name of a long domain looks.
func longestDestination(i int) string {
	return fmt.Sprintf(".d%03d%s.%s.%s.%s", i, strings.Repeat("a", 59), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("e", 61))
}

// randomName is a name of 40 characters no compression can shorten much: two random labels of 12 and 20
// characters and .com, as real destinations of many unrelated services are.
func randomName(rnd *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	label := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		return string(b)
	}
	return label(12) + "." + label(20) + ".com"
}

// The schema's largest settings (500 destinations of the longest form, 200 client ranges, 100 private
// ranges and ports, auth and a 16 KB TLS chain), and the same with 500 random names of 40 characters, pass
// the plan-time check and are created, every parameter Standard (issue 35, item 7: before, create failed with
// ValidationException from about 115 destinations, while the plan passed). The guest reads them whole; Get
// reads the settings back without drift; a reconfiguration to a small config is applied and leaves the
// longer config's last parts behind, which Delete removes with every other parameter.
func TestLargestSettingsCreate(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	for name, dest := range map[string]func(int) string{
		"longest form": longestDestination,
		"random names": func(int) string { return randomName(rnd) },
	} {
		s := largestSettings(t, dest)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The region's quota of rules per group raised, as an account with 200 client ranges has it.
			fake, b := newTest(t, ec2fake.Options{MaxRulesPerGroup: proxyconf.MaxAllowedClientCIDRs})
			fake.PlayGuests()
			spec := testSpec(fake, "largest")
			o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
			o.WaitForProxy = true
			spec.Proxy = s
			if err := CheckParameterSizes(spec.Name, s, *o); err != nil {
				t.Fatalf("the plan-time check: %v", err)
			}
			inst, err := b.Create(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			params := proxyParameters(fake, spec.Name)
			parts := 0
			for n, p := range params {
				if p.Tier != "Standard" {
					t.Errorf("parameter %s is %s, want Standard", n, p.Tier)
				}
				if strings.HasPrefix(n, "config-") {
					parts++
				}
			}
			t.Logf("%s: %d parameters, the config in %d parts", name, len(params), parts)
			if c, _ := loadConfig(t, fake, spec.Name); c.TLSCert != s.TLS.CertificatePEM || !strings.Contains(c.SquidConf, strings.TrimPrefix(s.AllowedDestinations[499], ".")) {
				t.Error("the config as the guest reads it lacks the chain or the last destination")
			}
			got, err := b.Get(t.Context(), inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Drift != "" || got.Proxy == nil || !slices.Equal(got.Proxy.AllowedDestinations, s.AllowedDestinations) ||
				got.Proxy.TLS == nil || got.Proxy.TLS.CertificatePEM != s.TLS.CertificatePEM {
				t.Fatalf("Get = drift %q; want the settings read back whole and no drift", got.Drift)
			}

			// The same clients: the group is at its quota, and Reconfigure admits new ranges before it
			// revokes old ones.
			small := testProxy()
			small.AllowedClientCIDRs = s.AllowedClientCIDRs
			if _, err := b.Reconfigure(t.Context(), inst.ID, small); err != nil {
				t.Fatal(err)
			}
			if _, ok := proxyParameters(fake, spec.Name)[guest.PartName(guest.ParameterConfig, parts)]; parts > 1 && !ok {
				t.Errorf("the longer config's last part %d is gone after the small write: the test no longer proves Delete removes leftovers", parts)
			}
			if got, err := b.Get(t.Context(), inst.ID); err != nil || got.Drift != "" || !slices.Equal(got.Proxy.AllowedDestinations, small.AllowedDestinations) {
				t.Fatalf("Get after the small write = %v, drift %q", err, got.Drift)
			}
			if err := b.Delete(t.Context(), inst.ID); err != nil {
				t.Fatal(err)
			}
			if left := proxyParameters(fake, spec.Name); len(left) > 0 {
				t.Errorf("after Delete the proxy's parameters %v are left", left)
			}
		})
	}
}

// Settings whose packed config SSM cannot hold fail the plan-time check, naming the attribute that takes the
// most and about how much of it to remove; the backend refuses them before it makes anything.
func TestParameterSizesNamesWhatToReduce(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	label := func(n int) string {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		return string(b)
	}
	// 500 random names of 253 characters: nothing to compress, far more than nine parts hold.
	s := testProxy()
	s.AllowedDestinations = nil
	for range proxyconf.MaxAllowedDestinations {
		s.AllowedDestinations = append(s.AllowedDestinations, "."+label(63)+"."+label(63)+"."+label(63)+"."+label(61))
	}
	err := CheckParameterSizes("huge", s, Options{})
	var e *ParameterSizeError
	if !errors.As(err, &e) || e.Parameter != guest.ParameterConfig || e.Attribute != "allowed_destinations" || e.Chars <= e.Limit || e.Limit != guest.MaxPackedChars {
		t.Fatalf("CheckParameterSizes = %v (%+v), want the config over %d characters, on allowed_destinations", err, e, guest.MaxPackedChars)
	}
	var remove int
	if _, after, ok := strings.Cut(err.Error(), "remove about "); !ok || func() error { _, err := fmt.Sscanf(after, "%d", &remove); return err }() != nil {
		t.Fatalf("the error says nothing of how many to remove: %v", err)
	}
	// Removing that many (and a few, as the estimate allows) fits.
	fits := s
	fits.AllowedDestinations = s.AllowedDestinations[:len(s.AllowedDestinations)-remove-5]
	if err := CheckParameterSizes("huge", fits, Options{}); err != nil {
		t.Errorf("with %d destinations removed, as the error advised: %v", remove, err)
	}
	t.Logf("%v", err)

	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "huge")
	spec.Proxy = s
	if _, err := b.Create(t.Context(), spec); backend.ClassOf(err) != backend.ClassPermanent || !errors.As(err, &e) {
		t.Fatalf("Create = %v, want Permanent with the size error", err)
	}
	if n := len(fake.Requests()); n > 3 {
		t.Errorf("%d requests before the refusal, want none but resolving the image", n)
	}
}

// Secrets SSM cannot hold name the key, which takes the most of them even beside the most users; the most
// users of the longest names with an RSA-sized key fit.
func TestSecretsSizeNamesWhatToReduce(t *testing.T) {
	t.Parallel()
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	var many []proxyconf.BasicAuth
	for i := range proxyconf.MaxUsers {
		many = append(many, proxyconf.BasicAuth{Username: fmt.Sprintf("%02d%s", i, strings.Repeat("u", 62)), Password: "correct-horse-battery"})
	}
	pad := func(n int) string { return strings.Repeat("#", n) + "\n" + key } // text before a PEM block is allowed
	for name, tc := range map[string]struct {
		users []proxyconf.BasicAuth
		key   string
		want  string // the attribute named; "" for settings that fit
	}{
		"most users, a small key":             {many, key, ""},
		"most users, an RSA-sized key":        {many, pad(3300), ""},
		"most users, the largest key allowed": {many, pad(proxyconf.MaxPEMBytes - len(key) - 1), "tls.private_key_pem"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := testProxy()
			s.Users, s.TLS = tc.users, &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: tc.key}
			err := CheckParameterSizes("secrets", s, Options{})
			var e *ParameterSizeError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckParameterSizes = %v, want the secrets to fit", err)
			case tc.want != "" && (!errors.As(err, &e) || e.Parameter != guest.ParameterSecrets || e.Attribute != tc.want):
				t.Fatalf("CheckParameterSizes = %v (%+v), want the secrets over the limit, on %s", err, e, tc.want)
			}
		})
	}
}

// A parameter that once needed the Advanced tier (the whole config an earlier provider wrote) is overwritten
// with a value that fits Standard (its manifest): the write keeps it Advanced, as SSM refuses a downgrade
// (ec2fake R29), instead of failing; the parts are Standard (issue 35, item 7).
func TestOverwriteKeepsTheTier(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "shrinks")
	r, o, err := b.resolve(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, format := range []guest.ConfigFormat{guest.FormatWhole, guest.FormatParts} {
		p, err := renderParameters(spec.Name, spec.Proxy, format)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.putParameters(t.Context(), r, spec, newStoredSpec(spec.Proxy, o, p), p, ""); err != nil {
			t.Fatalf("write %d (%d characters): %v", i, len(p.config), err)
		}
	}
	params := proxyParameters(fake, spec.Name)
	if got := params[guest.ParameterConfig]; got.Tier != "Advanced" || len(got.Value) > maxStandardParameter {
		t.Errorf("the config parameter after the manifest's write: tier %q, %d characters, want Advanced and a manifest", got.Tier, len(got.Value))
	}
	if got := params[guest.PartName(guest.ParameterConfig, 1)]; got.Tier != "Standard" {
		t.Errorf("the config's part: tier %q, want Standard", got.Tier)
	}
}

// asPreviousVersion makes the proxy's parameters what a provider before packed configs wrote: the whole
// config in the config parameter (Advanced: it is over 4 KB), the settings whole, without a config format,
// and no parts. The instance's guest of that provider reads only that format.
func asPreviousVersion(t *testing.T, fake *ec2fake.Server, spec backend.Spec) parameters {
	t.Helper()
	p, err := renderParameters(spec.Name, spec.Proxy, guest.FormatWhole)
	if err != nil {
		t.Fatal(err)
	}
	st := newStoredSpec(spec.Proxy, *spec.Placement.Options.(*Options), p) //nolint:forcetypeassert // testSpec's own options
	stored, err := json.Marshal(st)
	if err != nil || strings.Contains(string(stored), "config_format") {
		t.Fatalf("the previous version's settings: %v %s", err, stored)
	}
	c := ssm.NewFromConfig(fake.AdminAWSConfig(testRegion))
	for _, w := range []struct {
		name, value string
		typ         ssmtypes.ParameterType
	}{
		{guest.ParameterSettings, string(stored), ssmtypes.ParameterTypeString},
		{guest.ParameterConfig, string(p.config), ssmtypes.ParameterTypeString},
		{guest.ParameterSecrets, string(p.secrets), ssmtypes.ParameterTypeSecureString},
	} {
		if _, err := c.PutParameter(t.Context(), &ssm.PutParameterInput{Name: awssdk.String(guest.ParameterPath(spec.Name, w.name)),
			Value: awssdk.String(w.value), Type: w.typ, Overwrite: awssdk.Bool(true), Tier: tierFor(w.value)}); err != nil {
			t.Fatal(err)
		}
	}
	var parts []string
	for _, path := range guest.ParameterPaths(spec.Name) {
		if strings.Contains(path[len(guest.ParameterPath(spec.Name, "")):], "-") {
			parts = append(parts, path)
		}
	}
	for len(parts) > 0 {
		batch := parts[:min(len(parts), 10)]
		parts = parts[len(batch):]
		if _, err := c.DeleteParameters(t.Context(), &ssm.DeleteParametersInput{Names: batch}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A proxy an earlier provider launched runs the guest of that provider, which the user-data installed at
// its first boot and which reads only the whole config in one parameter. Reconfigure keeps writing that
// format to it, in the parameter's Advanced tier, and its guest applies it; rules that format cannot hold
// are refused before anything changes, with advice to replace the proxy, which then gets the current guest.
func TestPreviousVersionProxyKeepsItsFormat(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "older")
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	old := asPreviousVersion(t, fake, spec)
	waitFor(t, func() bool { return applied(t, fake, spec.Name).ConfigID == old.configID })
	if got, err := b.Get(t.Context(), inst.ID); err != nil || got.Drift != "" {
		t.Fatalf("Get of the earlier provider's proxy = %v, drift %q", err, got.Drift)
	}

	changed := testProxy()
	changed.AllowedDestinations = []string{"example.com", "example.org"}
	if _, err := b.Reconfigure(t.Context(), inst.ID, changed); err != nil {
		t.Fatal(err)
	}
	params := proxyParameters(fake, spec.Name)
	config, format := loadConfig(t, fake, spec.Name)
	if format != guest.FormatWhole || !strings.Contains(config.SquidConf, "example.org") || params[guest.ParameterConfig].Tier != "Advanced" {
		t.Errorf("after Reconfigure the config is in format %d, tier %s; want the whole new config, still Advanced", format, params[guest.ParameterConfig].Tier)
	}
	if _, ok := params[guest.PartName(guest.ParameterConfig, 1)]; ok {
		t.Error("Reconfigure wrote config parts the proxy's guest does not read")
	}
	if got, err := b.Get(t.Context(), inst.ID); err != nil || got.Drift != "" || !slices.Equal(got.Proxy.AllowedDestinations, changed.AllowedDestinations) {
		t.Fatalf("Get after Reconfigure = %v, drift %q", err, got.Drift)
	}

	before := params[guest.ParameterConfig].Version
	tooLarge := changed
	for i := range 200 {
		tooLarge.AllowedDestinations = append(tooLarge.AllowedDestinations, fmt.Sprintf("service-%03d.partner.example.com", i))
	}
	_, err = b.Reconfigure(t.Context(), inst.ID, tooLarge)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "earlier version") || !strings.Contains(backend.AdviceOf(err), "-replace") {
		t.Fatalf("Reconfigure with rules the old format cannot hold = %v, want Permanent advising a replacement", err)
	}
	if after := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version; after != before {
		t.Errorf("the refused Reconfigure wrote the config (version %d, was %d)", after, before)
	}
}

// A reconfiguration whose config takes more parts than before binds the new parts to the instance as it
// writes them: the instance's role, under the documented condition on TagInstance, reads the manifest and
// every part at once (a part made without the tag would be AccessDeniedException until a later tagging).
func TestGrownConfigPartsAreBound(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{Roles: []ec2fake.Role{{Name: "egress-proxy", Policy: documentedPolicy(t, InstanceRolePolicyFile)}}})
	fake.PlayGuests()
	spec := testSpec(fake, "grows")
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	grown := testProxy()
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		grown.AllowedDestinations = append(grown.AllowedDestinations, randomName(rnd))
	}
	if _, err := b.Reconfigure(t.Context(), inst.ID, grown); err != nil {
		t.Fatal(err)
	}
	h, ok := guest.ParseHead(proxyParameters(fake, spec.Name)[guest.ParameterConfig].Value)
	if !ok || h.Parts < 2 {
		t.Fatalf("the grown config's manifest %+v: want several parts", h)
	}
	var id string
	for _, in := range fake.Instances(testRegion) {
		id = in.ID
	}
	k, sk, tok := fake.InstanceProfileCredentials("egress-proxy", id, time.Hour)
	cfg := fake.AWSConfig(testRegion)
	cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
	names := []string{guest.ParameterPath(spec.Name, guest.ParameterConfig)}
	for i := 1; i <= h.Parts; i++ {
		names = append(names, guest.ParameterPath(spec.Name, guest.PartName(guest.ParameterConfig, i)))
	}
	out, err := ssm.NewFromConfig(cfg).GetParameters(context.Background(), &ssm.GetParametersInput{Names: names})
	if err != nil {
		t.Fatalf("the instance reading its manifest and %d parts: %v", h.Parts, err)
	}
	if len(out.Parameters) != len(names) {
		t.Fatalf("the instance reading its manifest and %d parts: %d answered", h.Parts, len(out.Parameters))
	}
}
