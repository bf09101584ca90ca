package gcp

import (
	"testing"
)

// Every VM is a Shielded VM with project SSH keys blocked and OS Login on, unless its placement opts out of
// one; what it got is read back from the instance, and a reconfiguration keeps it.
func TestInsertCarriesHardeningUnlessOptedOut(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]Options{
		"defaults":                {},
		"no shielded vm":          {DisableShieldedVM: true},
		"project ssh keys":        {AllowProjectSSHKeys: true, DisableOSLogin: true},
		"no os login":             {DisableOSLogin: true},
		"every default opted out": {DisableShieldedVM: true, AllowProjectSSHKeys: true, DisableOSLogin: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b, _ := newTestWithGuest(t)
			ctx := ctxT(t)
			spec := testSpec("uid-hardening", "us-central1-a")
			fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
			pl := opt
			spec.Placement.Options = &pl
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			next := spec.Proxy
			next.AllowedDestinations = []string{".example.org"}
			if _, err := b.Reconfigure(ctx, inst.ID, next); err != nil {
				t.Fatal(err)
			}
			in := fake.Instance(testProject, "us-central1-a", spec.Name)
			sc := in.GetShieldedInstanceConfig()
			shielded := sc != nil && sc.GetEnableSecureBoot() && sc.GetEnableVtpm() && sc.GetEnableIntegrityMonitoring()
			if shielded == opt.DisableShieldedVM {
				t.Errorf("shieldedInstanceConfig %v, want all three features %v", sc, !opt.DisableShieldedVM)
			}
			if opt.DisableShieldedVM && sc != nil {
				t.Errorf("shieldedInstanceConfig %v sent although opted out", sc)
			}
			for key, optedOut := range map[string]bool{MetadataBlockProjectSSHKeys: opt.AllowProjectSSHKeys, MetadataEnableOSLogin: opt.DisableOSLogin} {
				v, set := metadataValue(in, key)
				if optedOut && set {
					t.Errorf("metadata %s = %q although opted out: the project's metadata must decide", key, v)
				}
				if !optedOut && v != "TRUE" {
					t.Errorf("metadata %s = %q, %v; want TRUE", key, v, set)
				}
			}
			got, err := b.Get(ctx, inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			r := optionsOf(got.Placement)
			if r.DisableShieldedVM != opt.DisableShieldedVM || r.AllowProjectSSHKeys != opt.AllowProjectSSHKeys || r.DisableOSLogin != opt.DisableOSLogin {
				t.Errorf("read back %+v, want the opt-outs of %+v", r, opt)
			}
		})
	}
}
