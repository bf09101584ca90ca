package aws

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// Reconfigure and a Create with wait_for_proxy return once the guest reports the new config applied, and
// not before (issue 35, item 13): against a guest that answers, one that answers late, one that never does
// and one that refuses the config.
func TestWaitForTheGuest(t *testing.T) {
	t.Parallel()
	changed := testProxy()
	changed.AllowedDestinations = []string{"example.com", "example.org"}
	for name, tc := range map[string]struct {
		// reconfigure: the wait is Reconfigure's; otherwise Create's, with wait_for_proxy.
		reconfigure bool
		mode        ec2fake.GuestMode
		late        bool // the guest turns GuestApplies once the backend has polled the applied parameter
		wantErr     string
		wantClass   backend.Class
	}{
		"create, guest applies":      {mode: ec2fake.GuestApplies},
		"create, guest late":         {mode: ec2fake.GuestSilent, late: true},
		"create, guest silent":       {mode: ec2fake.GuestSilent, wantErr: "waiting for the guest to apply config", wantClass: backend.ClassTransient},
		"create, guest refuses":      {mode: ec2fake.GuestRefuses, wantErr: "its guest refused config", wantClass: backend.ClassPermanent},
		"reconfigure, guest applies": {reconfigure: true, mode: ec2fake.GuestApplies},
		"reconfigure, guest late":    {reconfigure: true, mode: ec2fake.GuestSilent, late: true},
		"reconfigure, guest silent":  {reconfigure: true, mode: ec2fake.GuestSilent, wantErr: "waiting for the guest to apply config", wantClass: backend.ClassTransient},
		"reconfigure, guest refuses": {reconfigure: true, mode: ec2fake.GuestRefuses, wantErr: "its guest refused config", wantClass: backend.ClassPermanent},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			spec := testSpec(fake, "waited")
			o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
			// The image given, so that the only GetParameter is the wait's poll of the applied parameter.
			o.WaitForProxy, o.AMI = true, ec2fake.DebianAMI(0, "amd64")
			var inst backend.Instance
			if tc.reconfigure {
				var err error
				if inst, err = b.Create(context.Background(), spec); err != nil {
					t.Fatal(err)
				}
			}
			fake.SetGuest(testRegion, spec.Name, tc.mode)
			if tc.late {
				// Late: the guest applies only once the backend is waiting, seen by its first poll of applied.
				p := fake.PauseNext("GetParameter", false)
				go func() {
					<-p.Reached()
					fake.SetGuest(testRegion, spec.Name, ec2fake.GuestApplies)
					p.Resume()
				}()
			}
			// A silent guest is waited for until the operation's context ends: here once the backend has polled
			// the applied parameter twice (the first poll answered "not yet"), as a timeout would end it.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.wantErr != "" && tc.wantClass == backend.ClassTransient {
				before := fake.Count("GetParameter")
				go func() {
					for fake.Count("GetParameter") < before+2 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(10 * time.Millisecond):
						}
					}
					cancel()
				}()
			}
			var err error
			if tc.reconfigure {
				_, err = b.Reconfigure(ctx, inst.ID, changed)
			} else {
				inst, err = b.Create(ctx, spec)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				var be *backend.Error
				if !errors.As(err, &be) || (tc.wantClass == backend.ClassPermanent && be.Class != backend.ClassPermanent) {
					t.Fatalf("err = %#v, want class %s", err, tc.wantClass)
				}
				if tc.wantClass == backend.ClassPermanent && !strings.Contains(err.Error(), ec2fake.GuestRefusal) {
					t.Errorf("err = %v, want the guest's reason %q", err, ec2fake.GuestRefusal)
				}
			}
			// What the backend waited for is what the guest reported, read over the wire.
			got := applied(t, fake, spec.Name)
			want, _ := b.storedConfigID(t, spec.Name)
			if (tc.wantErr == "") != (got.ConfigID == want) {
				t.Errorf("the guest reports %+v, the provider wrote %s; the wait returned %v", got, want, err)
			}
		})
	}
}

// storedConfigID is the config id the settings parameter says the provider last wrote.
func (b *Backend) storedConfigID(t *testing.T, name string) (string, bool) {
	t.Helper()
	r, err := b.clients(context.Background(), testRegion)
	if err != nil {
		t.Fatal(err)
	}
	st, ok, _, err := b.readStoredSpec(context.Background(), r, name)
	if err != nil {
		t.Fatal(err)
	}
	return st.ConfigID, ok
}

// applied is the proxy's applied parameter as GetParameter answers it; zero when there is none.
func applied(t *testing.T, fake *ec2fake.Server, name string) guest.Applied {
	t.Helper()
	out, err := ssm.NewFromConfig(fake.AdminAWSConfig(testRegion)).GetParameter(context.Background(),
		&ssm.GetParameterInput{Name: awssdk.String(guest.ParameterPath(name, guest.ParameterApplied))})
	if err != nil {
		var nf *ssmtypes.ParameterNotFound
		if errors.As(err, &nf) {
			return guest.Applied{}
		}
		t.Fatal(err)
	}
	return guest.ParseApplied(awssdk.ToString(out.Parameter.Value))
}

// Get reports drift when the config parameter, one of its parts, or the config the guest applied is not the
// one the provider wrote, and Reconfigure with the same settings puts it back (issue 35, items 1 and 7).
func TestGetReportsConfigDrift(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tamper    func(t *testing.T, fake *ec2fake.Server, c *ssm.Client, name string)
		wantDrift string
	}{
		"untouched": {tamper: func(*testing.T, *ec2fake.Server, *ssm.Client, string) {}},
		"config overwritten": {tamper: func(t *testing.T, _ *ec2fake.Server, c *ssm.Client, name string) {
			put(t, c, guest.ParameterPath(name, guest.ParameterConfig), `{"config_id":"x","squid_conf":"url_rewrite_program /bin/sh\n"}`)
		}, wantDrift: "was changed by someone other than this provider"},
		"config deleted": {tamper: func(t *testing.T, _ *ec2fake.Server, c *ssm.Client, name string) {
			if _, err := c.DeleteParameters(context.Background(), &ssm.DeleteParametersInput{Names: []string{guest.ParameterPath(name, guest.ParameterConfig)}}); err != nil {
				t.Fatal(err)
			}
		}, wantDrift: "is gone"},
		"a config part overwritten": {tamper: func(t *testing.T, _ *ec2fake.Server, c *ssm.Client, name string) {
			// A part that still unpacks (its own base64 of gzip), to a config with another directive: what
			// someone who may write the parts but not the manifest could try.
			h, parts := guest.Pack([]byte(`{"squid_conf":"url_rewrite_program /bin/sh\n"}`))
			if h.Parts != 1 {
				t.Fatal(h)
			}
			put(t, c, guest.ParameterPath(name, guest.PartName(guest.ParameterConfig, 1)), parts[0])
		}, wantDrift: "were changed by someone other than this provider"},
		"a config part deleted": {tamper: func(t *testing.T, _ *ec2fake.Server, c *ssm.Client, name string) {
			if _, err := c.DeleteParameters(context.Background(), &ssm.DeleteParametersInput{Names: []string{guest.ParameterPath(name, guest.PartName(guest.ParameterConfig, 1))}}); err != nil {
				t.Fatal(err)
			}
		}, wantDrift: "is gone"},
		"another config reported applied": {tamper: func(t *testing.T, fake *ec2fake.Server, c *ssm.Client, name string) {
			// Silent until Reconfigure, or the fake's guest would report the right id again before Get.
			fake.SetGuest(testRegion, name, ec2fake.GuestSilent)
			put(t, c, guest.ParameterPath(name, guest.ParameterApplied), "0123456789abcdef")
		}, wantDrift: "reports config 0123456789abcdef applied"},
		"the config refused": {tamper: func(t *testing.T, fake *ec2fake.Server, c *ssm.Client, name string) {
			// Refusing before the applied report is cleared: an applying guest could otherwise report the
			// config applied again in between, and a refusing one then has nothing new to refuse.
			fake.SetGuest(testRegion, name, ec2fake.GuestRefuses)
			put(t, c, guest.ParameterPath(name, guest.ParameterApplied), "-")
			waitFor(t, func() bool { return applied(t, fake, name).Refused != "" })
			// Silent, not applying, until Reconfigure: an applying guest could report the config applied
			// again before Get reads the refusal (seen: 6 of 20 runs).
			fake.SetGuest(testRegion, name, ec2fake.GuestSilent)
		}, wantDrift: "its guest refused config"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			spec := testSpec(fake, "drifted")
			spec.Placement.Options.(*Options).WaitForProxy = true //nolint:forcetypeassert // testSpec's own options
			inst, err := b.Create(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if inst.Drift != "" {
				t.Fatalf("Create = drift %q right after create", inst.Drift)
			}
			tc.tamper(t, fake, ssm.NewFromConfig(fake.AdminAWSConfig(testRegion)), spec.Name)
			got, err := b.Get(context.Background(), inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.wantDrift == "") != (got.Drift == "") || !strings.Contains(got.Drift, tc.wantDrift) {
				t.Fatalf("Get = drift %q, want %q", got.Drift, tc.wantDrift)
			}
			if tc.wantDrift == "" {
				return
			}
			if got.Proxy == nil || !got.Reconfigurable {
				t.Fatalf("Get = %+v: a drifted proxy must read back its settings and stay reconfigurable, so the plan is an update in place", got)
			}
			fake.SetGuest(testRegion, spec.Name, ec2fake.GuestApplies)
			back, err := b.Reconfigure(context.Background(), inst.ID, spec.Proxy)
			if err != nil {
				t.Fatalf("Reconfigure with the same settings: %v", err)
			}
			if back.Drift != "" {
				t.Fatalf("Reconfigure = drift %q, want it put back", back.Drift)
			}
		})
	}
}

func put(t *testing.T, c *ssm.Client, path, value string) {
	t.Helper()
	_, err := c.PutParameter(context.Background(), &ssm.PutParameterInput{Name: awssdk.String(path), Value: awssdk.String(value),
		Type: ssmtypes.ParameterTypeString, Overwrite: awssdk.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds: the fake's guests report on their own goroutine.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("the fake's guests did not report within a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kms_key_id encrypts the secrets parameter with the customer-managed key, and only it: the config and
// settings are Strings (issue 35, item 3). Without it, SSM's default key.
func TestSecretsUnderTheCustomerKey(t *testing.T) {
	t.Parallel()
	const key = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	for name, want := range map[string]string{"": ec2fake.DefaultParameterKey, key: key} {
		t.Run("key "+name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			spec := testSpec(fake, "kms")
			spec.Placement.Options.(*Options).KMSKeyID = name //nolint:forcetypeassert // testSpec's own options
			inst, err := b.Create(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Reconfigure(context.Background(), inst.ID, spec.Proxy); err != nil {
				t.Fatal(err)
			}
			secrets, _ := fake.Parameter(testRegion, guest.ParameterPath(spec.Name, guest.ParameterSecrets))
			if secrets.Type != "SecureString" || secrets.KeyID != want || secrets.Version != 2 {
				t.Errorf("secrets after a reconfigure: %s under %q, version %d; want a SecureString under %q, version 2", secrets.Type, secrets.KeyID, secrets.Version, want)
			}
			got, err := b.Get(context.Background(), inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := got.Placement.Options.(*Options); o == nil || o.KMSKeyID != name {
				t.Errorf("Get = options %+v, want kms key %q read back", got.Placement.Options, name)
			}
		})
	}
}
