package secretmanagerfake

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/iam/apiv1/iampb"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"github.com/googleapis/gax-go/v2/apierror"
	"golang.org/x/oauth2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
)

// One test per rule of README.md, named by its number there, through the real REST client where it can send
// the request, over plain HTTP where it cannot (a request the client never makes is still a rule of the API).

const admin = "provider-token"

func client(t *testing.T, s *Server, token string) *secretmanager.Client {
	t.Helper()
	ctx := context.Background()
	c, err := secretmanager.NewRESTClient(ctx, option.WithEndpoint(s.URL),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func automatic() *secretmanagerpb.Replication {
	return &secretmanagerpb.Replication{Replication: &secretmanagerpb.Replication_Automatic_{Automatic: &secretmanagerpb.Replication_Automatic{}}}
}

func create(ctx context.Context, c *secretmanager.Client, id string, labels map[string]string) (*secretmanagerpb.Secret, error) {
	return c.CreateSecret(ctx, &secretmanagerpb.CreateSecretRequest{Parent: "projects/p", SecretId: id,
		Secret: &secretmanagerpb.Secret{Replication: automatic(), Labels: labels}})
}

// wantStatus fails unless err is the API's answer with the HTTP status and the words.
func wantStatus(t *testing.T, what string, err error, code int, words string) {
	t.Helper()
	var ae *apierror.APIError
	if !errors.As(err, &ae) || ae.HTTPCode() != code || !strings.Contains(err.Error(), words) {
		t.Errorf("%s: %v, want HTTP %d with %q", what, err, code, words)
	}
}

func TestDocumentedRules(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(t *testing.T, s *Server, c *secretmanager.Client){
		"S1 authentication": func(t *testing.T, s *Server, _ *secretmanager.Client) {
			resp, err := http.Get(s.URL + "/v1/projects/p/secrets/x")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("no token: %d, want 401", resp.StatusCode)
			}
			_, err = create(context.Background(), client(t, s, "unknown"), "x", nil)
			wantStatus(t, "unknown token", err, 401, "invalid authentication credentials")
		},
		"S2 secret ID": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			for _, bad := range []string{"a.b", "a/b", strings.Repeat("x", 256), "ü"} {
				_, err := create(context.Background(), c, bad, nil)
				wantStatus(t, bad, err, 400, "Secret ID")
			}
			if _, err := create(context.Background(), c, "Aa_0-"+strings.Repeat("x", 250), nil); err != nil {
				t.Errorf("a valid id of 255 characters: %v", err)
			}
		},
		"S3 replication": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			_, err := c.CreateSecret(context.Background(), &secretmanagerpb.CreateSecretRequest{Parent: "projects/p", SecretId: "x", Secret: &secretmanagerpb.Secret{}})
			wantStatus(t, "none", err, 400, "replication")
		},
		"S4 labels": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			for name, l := range map[string]map[string]string{
				"upper key": {"Team": "a"}, "digit first": {"1a": "a"}, "upper value": {"a": "B"}, "long value": {"a": strings.Repeat("v", 64)},
			} {
				_, err := create(context.Background(), c, "x", l)
				wantStatus(t, name, err, 400, "label")
			}
			many := map[string]string{}
			for i := range 65 {
				many["k"+strings.Repeat("x", i)] = ""
			}
			_, err := create(context.Background(), c, "x", many)
			wantStatus(t, "65 labels", err, 400, "64 labels")
		},
		"S5 already exists": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			ctx := context.Background()
			if _, err := create(ctx, c, "x", nil); err != nil {
				t.Fatal(err)
			}
			_, err := create(ctx, c, "x", nil)
			wantStatus(t, "again", err, 409, "already exists")
		},
		"S6 payload size": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			ctx := context.Background()
			if _, err := create(ctx, c, "x", nil); err != nil {
				t.Fatal(err)
			}
			_, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/x",
				Payload: &secretmanagerpb.SecretPayload{Data: make([]byte, 64*1024+1)}})
			wantStatus(t, "64 KiB and one byte", err, 400, "64KiB")
			if _, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/x",
				Payload: &secretmanagerpb.SecretPayload{Data: make([]byte, 64*1024)}}); err != nil {
				t.Errorf("64 KiB: %v", err)
			}
		},
		"S7 checksum": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			ctx := context.Background()
			if _, err := create(ctx, c, "x", nil); err != nil {
				t.Fatal(err)
			}
			wrong := int64(1)
			_, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/x",
				Payload: &secretmanagerpb.SecretPayload{Data: []byte("s"), DataCrc32C: &wrong}})
			wantStatus(t, "wrong checksum", err, 400, "Checksum")
			if _, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/x",
				Payload: &secretmanagerpb.SecretPayload{Data: []byte("s")}}); err != nil {
				t.Fatal(err)
			}
			resp, err := c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: "projects/p/secrets/x/versions/1"})
			if err != nil || resp.GetPayload().DataCrc32C == nil || resp.GetPayload().GetDataCrc32C() != crc(resp.GetPayload().GetData()) {
				t.Errorf("access: %v %v, want the payload with its CRC32C", resp, err)
			}
		},
		"S8 versions and latest": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			ctx := context.Background()
			if _, err := create(ctx, c, "x", nil); err != nil {
				t.Fatal(err)
			}
			_, err := c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: "projects/p/secrets/x/versions/latest"})
			wantStatus(t, "no version", err, 404, "not found")
			for _, d := range []string{"one", "two"} {
				if _, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/x",
					Payload: &secretmanagerpb.SecretPayload{Data: []byte(d)}}); err != nil {
					t.Fatal(err)
				}
			}
			for v, want := range map[string]string{"1": "one", "2": "two", "latest": "two"} {
				resp, err := c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: "projects/p/secrets/x/versions/" + v})
				if err != nil || string(resp.GetPayload().GetData()) != want {
					t.Errorf("version %s: %v %v, want %q", v, resp, err, want)
				}
			}
			_, err = c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: "projects/p/secrets/x/versions/3"})
			wantStatus(t, "version 3", err, 404, "not found")
		},
		"S9 who may read": func(t *testing.T, s *Server, c *secretmanager.Client) {
			ctx := context.Background()
			for _, id := range []string{"a", "b"} {
				if _, err := create(ctx, c, id, nil); err != nil {
					t.Fatal(err)
				}
				if _, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/" + id,
					Payload: &secretmanagerpb.SecretPayload{Data: []byte(id)}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: "projects/p/secrets/a",
				Policy: &iampb.Policy{Bindings: []*iampb.Binding{{Role: AccessorRole, Members: []string{"serviceAccount:vm-a@p.iam.gserviceaccount.com"}}}}}); err != nil {
				t.Fatal(err)
			}
			vm := client(t, s, s.ServiceAccountToken("vm-a@p.iam.gserviceaccount.com"))
			if resp, err := vm.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: "projects/p/secrets/a/versions/latest"}); err != nil || string(resp.GetPayload().GetData()) != "a" {
				t.Errorf("its own secret: %v %v", resp, err)
			}
			for _, name := range []string{"projects/p/secrets/b", "projects/p/secrets/missing"} {
				_, err := vm.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: name + "/versions/latest"})
				wantStatus(t, name, err, 403, "Permission 'secretmanager.versions.access' denied")
			}
			_, err := vm.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: "projects/p/secrets/a"})
			wantStatus(t, "get", err, 403, "secretmanager.secrets.get")
			_, err = vm.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: "projects/p/secrets/a", Payload: &secretmanagerpb.SecretPayload{Data: []byte("x")}})
			wantStatus(t, "add a version", err, 403, "secretmanager.versions.add")
			_, err = vm.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: "projects/p/secrets/b",
				Policy: &iampb.Policy{Bindings: []*iampb.Binding{{Role: AccessorRole, Members: []string{"serviceAccount:vm-a@p.iam.gserviceaccount.com"}}}}})
			wantStatus(t, "grant itself another secret", err, 403, "setIamPolicy")
		},
		"S10 etags": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			ctx := context.Background()
			sec, err := create(ctx, c, "x", nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: "projects/p/secrets/x"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: "projects/p/secrets/x", Policy: p}); err != nil {
				t.Fatal(err)
			}
			_, err = c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: "projects/p/secrets/x", Policy: p})
			wantStatus(t, "stale policy etag", err, 409, "concurrent policy changes")
			err = c.DeleteSecret(ctx, &secretmanagerpb.DeleteSecretRequest{Name: "projects/p/secrets/x", Etag: `"stale"`})
			wantStatus(t, "stale secret etag", err, 409, "etag")
			if err := c.DeleteSecret(ctx, &secretmanagerpb.DeleteSecretRequest{Name: "projects/p/secrets/x", Etag: sec.GetEtag()}); err != nil {
				t.Fatal(err)
			}
			_, err = c.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: "projects/p/secrets/x"})
			wantStatus(t, "deleted", err, 404, "not found")
		},
		"S11 unknown fields": func(t *testing.T, s *Server, _ *secretmanager.Client) {
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/projects/p/secrets?secretId=x", strings.NewReader(`{"replication":{"automatic":{}},"colour":"red"}`))
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("unknown field: %d, want 400", resp.StatusCode)
			}
		},
		"S12 names carry the project number": func(t *testing.T, _ *Server, c *secretmanager.Client) {
			sec, err := create(context.Background(), c, "x", nil)
			if err != nil || sec.GetName() != "projects/"+projectNumber("p")+"/secrets/x" || sec.GetName() == "projects/p/secrets/x" {
				t.Errorf("created %v %v, want it named by the project's number", sec.GetName(), err)
			}
		},
		"S14 listing with a filter": func(t *testing.T, s *Server, c *secretmanager.Client) {
			ctx := context.Background()
			mine := map[string]string{"egress-managed-by": "terraform-provider-egress", "egress-owner": "team-a"}
			theirs := map[string]string{"egress-managed-by": "terraform-provider-egress", "egress-owner": "team-b"}
			for _, sec := range []struct {
				id     string
				labels map[string]string
			}{{"proxy-a", mine}, {"proxy-b", theirs}, {"apikey-production", nil}} {
				if _, err := create(ctx, c, sec.id, sec.labels); err != nil {
					t.Fatal(err)
				}
			}
			other := "projects/q"
			if _, err := c.CreateSecret(ctx, &secretmanagerpb.CreateSecretRequest{Parent: other, SecretId: "proxy-q",
				Secret: &secretmanagerpb.Secret{Replication: automatic(), Labels: mine}}); err != nil {
				t.Fatal(err)
			}
			list := func(filter string) ([]string, error) {
				var ids []string
				it := c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p", Filter: filter})
				for {
					sec, err := it.Next()
					if errors.Is(err, iterator.Done) {
						return ids, nil
					}
					if err != nil {
						return ids, err
					}
					ids = append(ids, sec.GetName()[strings.LastIndex(sec.GetName(), "/")+1:])
				}
			}
			for filter, want := range map[string]string{
				"": "[apikey-production proxy-b proxy-a]", // newest first, this project's only
				`labels.egress-managed-by=terraform-provider-egress AND labels.egress-owner=team-a`: "[proxy-a]",
				`labels.egress-managed-by="terraform-provider-egress" labels.egress-owner="team-a"`: "[proxy-a]",
				`labels.egress-owner:*`:        "[proxy-b proxy-a]",
				`NOT labels.egress-owner:*`:    "[apikey-production]",
				`-labels.egress-owner:*`:       "[apikey-production]",
				`labels.egress-owner!=team-a`:  "[apikey-production proxy-b]",
				`name:proxy-a OR name:proxy-b`: "[proxy-b proxy-a]",
				`name:APIKEY*production`:       "[]", // case matters
				`name:apikey*production`:       "[apikey-production]",
				`labels.egress-owner=team-a OR labels.egress-owner=team-b labels.egress-managed-by:*`: "[proxy-b proxy-a]",
				`(labels.egress-owner=team-a OR labels.egress-owner=team-b) AND NOT name:proxy-b`:     "[proxy-a]",
				`labels.egress-owner=team-c`: "[]",
			} {
				got, err := list(filter)
				if err != nil || fmt.Sprint(got) != want {
					t.Errorf("filter %q lists %v, %v; want %s", filter, got, err, want)
				}
			}
			for _, bad := range []string{`labels.egress-owner=`, `labels.egress-owner team-a`, `(name:x`, `AND name:x`, `colour=red`} {
				_, err := list(bad)
				wantStatus(t, "filter "+bad, err, http.StatusBadRequest, "Invalid filter")
			}
			_, err := list(`create_time>2021-01-01T00:00:00Z`)
			wantStatus(t, "a field the fake does not model", err, http.StatusNotImplemented, "create_time")

			// Pages, and total_size only without a filter.
			pager := iterator.NewPager(c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}), 2, "")
			var first []*secretmanagerpb.Secret
			token, err := pager.NextPage(&first)
			if err != nil || len(first) != 2 || token == "" {
				t.Fatalf("first page of 2: %d secrets, token %q, %v", len(first), token, err)
			}
			var rest []*secretmanagerpb.Secret
			if next, err := iterator.NewPager(c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}), 2, token).NextPage(&rest); err != nil || len(rest) != 1 || next != "" {
				t.Errorf("second page: %d secrets, token %q, %v; want the last one", len(rest), next, err)
			}
			_, err = iterator.NewPager(c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p", Filter: "name:proxy"}), 2, token).NextPage(&rest)
			wantStatus(t, "a token given for another filter", err, http.StatusBadRequest, "page_token")
			_, err = iterator.NewPager(c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}), 2, "not-a-token").NextPage(&rest)
			wantStatus(t, "a token the fake did not give", err, http.StatusBadRequest, "page_token")
			for filter, want := range map[string]int32{"": 3, "name:proxy": 0} {
				it := c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p", Filter: filter})
				if _, err := it.Next(); err != nil {
					t.Fatal(err)
				}
				if resp, ok := it.Response.(*secretmanagerpb.ListSecretsResponse); !ok || resp.GetTotalSize() != want {
					t.Errorf("total_size with filter %q: %v, want %d", filter, it.Response, want)
				}
			}
			_, err = client(t, s, s.ServiceAccountToken("vm@p.iam.gserviceaccount.com")).ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}).Next()
			wantStatus(t, "a service account lists", err, http.StatusForbidden, "Permission 'secretmanager.secrets.list' denied")
		},
		"S15 the API not enabled": func(t *testing.T, s *Server, c *secretmanager.Client) {
			ctx := context.Background()
			if _, err := create(ctx, c, "x", nil); err != nil {
				t.Fatal(err)
			}
			s.DisableAPI("p")
			_, err := c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}).Next()
			wantStatus(t, "list", err, http.StatusForbidden, "Secret Manager API has not been used in project "+projectNumber("p"))
			var ae *apierror.APIError
			if !errors.As(err, &ae) || ae.Reason() != "SERVICE_DISABLED" || ae.Domain() != "googleapis.com" ||
				ae.Metadata()["service"] != "secretmanager.googleapis.com" || ae.GRPCStatus().Code() != codes.PermissionDenied {
				t.Errorf("the refusal as the client reads it: %v (reason %q)", err, ae.Reason())
			}
			_, err = c.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: "projects/p/secrets/x"})
			wantStatus(t, "get", err, http.StatusForbidden, "SERVICE_DISABLED")
			if _, err := c.CreateSecret(ctx, &secretmanagerpb.CreateSecretRequest{Parent: "projects/q", SecretId: "y",
				Secret: &secretmanagerpb.Secret{Replication: automatic()}}); err != nil {
				t.Errorf("another project: %v", err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := New(Options{AdminToken: admin})
			t.Cleanup(s.Close)
			run(t, s, client(t, s, admin))
		})
	}
}

func crc(b []byte) int64 { return int64(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))) }
