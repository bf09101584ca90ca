package gcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// documentedSecretKeys are the metadata keys the docs name as holding a secret (the password's hash, the TLS
// key). Everything else about the instance is readable by whoever may read the instance, or by any process on
// the VM through the metadata server, and must hold no secret in any form.
var documentedSecretKeys = map[string]bool{proxyconf.MetadataHtpasswd: true, proxyconf.MetadataTLSKey: true}

// privateKeyMarker begins every PEM private key block, whatever its type.
const privateKeyMarker = "PRIVATE KEY"

// A proxy with a password and TLS, created and then given a new password and key in place: at each step the
// only places its secrets are in are the documented keys, and no other metadata item, no label, the
// description, the rest of the instance resource or the Instance the backend hands the provider holds them.
func TestReadableInstanceHoldsNoSecret(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	spec := testSpec("uid-secrets", "us-central1-a")
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert1, PrivateKeyPEM: key1}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	rotated := spec.Proxy
	rotated.Auth = &proxyconf.BasicAuth{Username: "u", Password: "another-horse-staple"}
	rotated.TLS = &proxyconf.TLSSettings{CertificatePEM: cert2, PrivateKeyPEM: key2}

	var earlier map[string]string
	for _, step := range []struct {
		name     string
		settings *proxyconf.Settings // nil: as created
	}{{name: "created"}, {name: "password and key rotated", settings: &rotated}} {
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
		in := fake.Instance(testProject, "us-central1-a", spec.Name)
		hashLine, _ := metadataValue(in, proxyconf.MetadataHtpasswd)
		_, hash, _ := strings.Cut(strings.TrimSpace(hashLine), ":")
		if key, _ := metadataValue(in, proxyconf.MetadataTLSKey); key != s.TLS.PrivateKeyPEM || hash == "" {
			t.Fatalf("%s: the documented keys do not hold the key and the password's hash: the scan would prove nothing", step.name)
		}
		secrets := map[string]string{"the password": s.Auth.Password, "the htpasswd hash": hash, "the private key": s.TLS.PrivateKeyPEM}
		for name, v := range earlier {
			secrets["the earlier "+strings.TrimPrefix(name, "the ")] = v
		}
		surfaces := readableSurfaces(in)
		backendView, _ := json.Marshal(inst)
		surfaces["the Instance handed to the provider"] = string(backendView)
		for _, name := range sortedKeys(surfaces) {
			if found := leaks(surfaces[name], secrets); len(found) > 0 {
				t.Errorf("%s: %s holds %s", step.name, name, strings.Join(found, ", "))
			}
		}
		earlier = secrets
	}
}

// readableSurfaces are the parts of an instance a reader without access to the secret keys sees: every other
// metadata item, the labels, the description, and the whole resource with the secret items left out.
func readableSurfaces(in *computepb.Instance) map[string]string {
	out := map[string]string{}
	rest, ok := proto.Clone(in).(*computepb.Instance)
	if !ok {
		panic("proto.Clone of an Instance is an Instance")
	}
	var kept []*computepb.Items
	for _, it := range rest.GetMetadata().GetItems() {
		if documentedSecretKeys[it.GetKey()] {
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
