package gcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"github.com/googleapis/gax-go/v2/apierror"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// documentedSecretKeys are the metadata keys the docs name as holding a secret (the password's hash, the TLS
// key) on a VM without a service account, the fallback. Everything else about the instance is readable by
// whoever may read the instance, or by any process on the VM through the metadata server, and must hold no
// secret in any form; a VM with a service account has no such key at all.
var documentedSecretKeys = map[string]bool{gcpguest.MetadataHtpasswd: true, gcpguest.MetadataTLSKey: true}

// privateKeyMarker begins every PEM private key block, whatever its type.
const privateKeyMarker = "PRIVATE KEY"

// A proxy with a password and TLS, created and then given a new password and key in place. With a service
// account (the default scopes), its secrets are in its Secret Manager secret, whose latest version holds the
// password's hash and the key at each step, which the VM's service account reads and another proxy's cannot,
// and no metadata item, label, description, the rest of the instance resource, the secret's own labels or the
// Instance the backend hands the provider holds them; Delete deletes the secret. Without a service account
// the only places they are in are the documented fallback keys.
func TestReadableInstanceHoldsNoSecret(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		serviceAccount string
		secretManager  bool
	}{
		"service account: Secret Manager": {"proxy-a@" + testProject + ".iam.gserviceaccount.com", true},
		"default service account":         {DefaultServiceAccount, true},
		"no service account: metadata":    {"", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scanSecrets(t, tc.serviceAccount, tc.secretManager)
		})
	}
}

func scanSecrets(t *testing.T, serviceAccount string, secretManager bool) {
	g := &guest{}
	fake, sm, b := newTestWithSecrets(t, computefake.Options{OnOperationDone: func(op, target string) { g.onDone(op, target) }})
	g.url = fake.URL
	ctx := ctxT(t)
	const zone = "us-central1-a"
	spec := testSpec("uid-secrets", zone)
	spec.Placement.Options = &Options{ServiceAccount: serviceAccount}
	fake.MetadataInstance(testProject, zone, spec.Name)
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert1, PrivateKeyPEM: key1}
	// Several users: each password and each hash is a secret the scan looks for.
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}, {Username: "v", Password: "second-users-battery"}}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Another proxy, with an account of its own: its account must not read this proxy's secret.
	other := testSpec("uid-other", zone)
	other.Placement.Options = &Options{ServiceAccount: "proxy-b@" + testProject + ".iam.gserviceaccount.com"}
	if _, err := b.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	rotated := spec.Proxy
	rotated.Users = []proxyconf.BasicAuth{{Username: "u", Password: "another-horse-staple"}, {Username: "w", Password: "third-users-staple"}}
	rotated.TLS = &proxyconf.TLSSettings{CertificatePEM: cert2, PrivateKeyPEM: key2}
	sid := secretID(zone, spec.Name)

	var earlier map[string]string
	for _, step := range []struct {
		name     string
		settings *proxyconf.Settings // nil: as created
	}{{name: "created"}, {name: "a password, a user and the key rotated", settings: &rotated}} {
		if step.settings != nil {
			if inst, err = b.Reconfigure(ctx, inst.ID, *step.settings); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		} else if inst, err = b.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		s := spec.Proxy
		if step.settings != nil {
			s = *step.settings
		}
		in := fake.Instance(testProject, zone, spec.Name)
		var hashLine, key string
		if secretManager {
			hashLine, key = secretFiles(t, ctx, sm, in, sid)
		} else {
			hashLine, _ = metadataValue(in, gcpguest.MetadataHtpasswd)
			key, _ = metadataValue(in, gcpguest.MetadataTLSKey)
		}
		if key != s.TLS.PrivateKeyPEM || !proxyconf.HtpasswdMatches([]byte(hashLine), s.Users) {
			t.Fatalf("%s: the secrets do not hold the key and every user's hash: the scan would prove nothing", step.name)
		}
		secrets := map[string]string{"the private key": s.TLS.PrivateKeyPEM}
		for _, line := range strings.Split(strings.TrimSpace(hashLine), "\n") {
			user, hash, _ := strings.Cut(line, ":")
			secrets["the htpasswd hash of "+user] = hash
		}
		for _, u := range s.Users {
			secrets["the password of "+u.Username] = u.Password
		}
		for name, v := range earlier {
			secrets["the earlier "+strings.TrimPrefix(name, "the ")] = v
		}
		surfaces := readableSurfaces(in, !secretManager)
		backendView, _ := json.Marshal(inst)
		surfaces["the Instance handed to the provider"] = string(backendView)
		if secretManager {
			surfaces["the secret's labels"] = fmt.Sprint(sm.Secret(testProject, sid).GetLabels())
		}
		for _, name := range sortedKeys(surfaces) {
			if found := leaks(surfaces[name], secrets); len(found) > 0 {
				t.Errorf("%s: %s holds %s", step.name, name, strings.Join(found, ", "))
			}
		}
		earlier = secrets
	}
	if !secretManager {
		if sm.Secret(testProject, sid) != nil {
			t.Errorf("a VM without a service account got a secret, %s, it cannot read", sid)
		}
		return
	}
	// The other proxy's account, with a token of its own, is refused this proxy's secret.
	otherToken := sm.ServiceAccountToken("proxy-b@" + testProject + ".iam.gserviceaccount.com")
	var refused *apierror.APIError
	if _, err := accessAs(ctx, t, sm, otherToken, "projects/"+testProject+"/secrets/"+sid); !errors.As(err, &refused) || refused.HTTPCode() != http.StatusForbidden {
		t.Errorf("another proxy's service account read this proxy's secret: %v, want PermissionDenied", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if sm.Secret(testProject, sid) != nil {
		t.Error("Delete left the proxy's secret")
	}
}

// secretFiles reads the proxy's secret as its VM does: with its service account's token, through the real
// client, at the version the metadata names.
func secretFiles(t *testing.T, ctx context.Context, sm *secretmanagerfake.Server, in *computepb.Instance, sid string) (htpasswd, key string) {
	t.Helper()
	name, ok := metadataValue(in, gcpguest.MetadataSecret)
	if !ok || name != "projects/"+testProject+"/secrets/"+sid {
		t.Fatalf("the metadata names the secret %q, want %s", name, sid)
	}
	sas := in.GetServiceAccounts()
	if len(sas) != 1 || !strings.Contains(sas[0].GetEmail(), "@") {
		t.Fatalf("the VM runs as %v", sas)
	}
	payload, err := accessAs(ctx, t, sm, sm.ServiceAccountToken(sas[0].GetEmail()), name)
	if err != nil {
		t.Fatalf("the VM's service account cannot read its secret: %v", err)
	}
	return string(payloadFile(payload, gcpguest.SecretLineHtpasswd)), string(payloadFile(payload, gcpguest.SecretLineTLSKey))
}

// accessAs reads the latest version of the secret name with token, through the real Secret Manager client.
func accessAs(ctx context.Context, t *testing.T, sm *secretmanagerfake.Server, token, name string) ([]byte, error) {
	t.Helper()
	c, err := secretmanager.NewRESTClient(ctx, option.WithEndpoint(sm.URL),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	resp, err := c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: name + "/versions/latest"})
	return resp.GetPayload().GetData(), err
}

// readableSurfaces are the parts of an instance a reader without access to the secrets sees: every metadata
// item (but the documented fallback keys, when fallback), the labels, the description, and the whole resource
// with those items left out.
func readableSurfaces(in *computepb.Instance, fallback bool) map[string]string {
	out := map[string]string{}
	rest, ok := proto.Clone(in).(*computepb.Instance)
	if !ok {
		panic("proto.Clone of an Instance is an Instance")
	}
	var kept []*computepb.Items
	for _, it := range rest.GetMetadata().GetItems() {
		if fallback && documentedSecretKeys[it.GetKey()] {
			continue
		}
		out["metadata item "+it.GetKey()] = it.GetValue()
		kept = append(kept, it)
	}
	if rest.Metadata != nil {
		rest.Metadata.Items = kept
	}
	out["the labels"] = fmt.Sprint(in.GetLabels())
	out["the description"] = in.GetDescription()
	b, err := protojson.Marshal(rest)
	if err != nil {
		panic(err)
	}
	out["the instance resource"] = string(b)
	return out
}

var (
	base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{16,}={0,2}`)
	// bcryptHash is any password hash of the htpasswd file's kind, not only the one in egress-htpasswd: a
	// second rendering of the same password has another salt, and is just as good to an offline guesser.
	bcryptHash = regexp.MustCompile(`\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}`)
)

// leaks names the secrets found in text, in any form a rendering could give them: as they are, JSON-escaped
// (a PEM's newlines become \n in a JSON document), any one line of them (a PEM re-wrapped still shows its
// body lines), inside base64 (cloud-init's write_files); and any PEM private key block or bcrypt hash at all.
func leaks(text string, secrets map[string]string) []string {
	texts := []string{text}
	for _, run := range base64Run.FindAllString(text, -1) {
		if b, err := base64.StdEncoding.DecodeString(run); err == nil {
			texts = append(texts, string(b))
		}
	}
	found := map[string]bool{}
	for _, t := range texts {
		for name, secret := range secrets {
			for _, form := range formsOf(secret) {
				if strings.Contains(t, form) {
					found[name] = true
				}
			}
		}
		if strings.Contains(t, privateKeyMarker) {
			found["a "+privateKeyMarker+" block"] = true
		}
		if bcryptHash.MatchString(t) {
			found["a bcrypt password hash"] = true
		}
	}
	var names []string
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func formsOf(secret string) []string {
	if secret == "" {
		return nil
	}
	forms := []string{secret}
	if j, err := json.Marshal(secret); err == nil {
		forms = append(forms, string(j[1:len(j)-1]))
	}
	for _, line := range strings.Split(secret, "\n") {
		// A PEM's body lines; its BEGIN and END lines are the marker's business.
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			forms = append(forms, line)
		}
	}
	return forms
}

// A provider account Secret Manager refuses (no role on the project, or the API off) stops a create of a VM
// with a service account before the VM is made, Permanent, saying what to grant.
func TestSecretManagerRefusesTheProvider(t *testing.T) {
	t.Parallel()
	fake := computefake.New(computefake.Options{Permissions: documentedPermissions(t)})
	t.Cleanup(fake.Close)
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "someone-else"})
	t.Cleanup(sm.Close)
	// A principal Secret Manager knows, holding no role there.
	token := sm.ServiceAccountToken("terraform@" + testProject + ".iam.gserviceaccount.com")
	b, err := New(Config{DefaultProject: testProject, ProjectConfig: ProjectConfig{
		ComputeEndpoint: fake.URL, SecretManagerEndpoint: sm.URL, AccessToken: token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.retry = backend.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond, Factor: 2}
	spec := testSpec("uid-refused", "us-central1-a")
	spec.Placement.Options = &Options{ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com"}
	_, err = b.Create(ctxT(t), spec)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(backend.AdviceOf(err), "roles/secretmanager.admin") {
		t.Fatalf("Create = %v (advice %q), want Permanent saying what to grant", err, backend.AdviceOf(err))
	}
	if len(fake.Instances()) != 0 {
		t.Error("a VM was made without its secret")
	}
}
