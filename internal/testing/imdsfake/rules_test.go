package imdsfake

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// One test per rule of README.md, each named by the rule's number there, against the fake's wire; where the
// AWS SDK reads the rule, its own client reads the fake.

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type harness struct {
	t     *testing.T
	s     *Server
	url   string
	clock *clock
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	// Today's time, not a fixed date: the SDK's credential provider caps an expiry against its own clock.
	c := &clock{now: time.Now().UTC().Truncate(time.Second)}
	opts.Now = c.Now
	s := New(opts)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &harness{t: t, s: s, url: srv.URL, clock: c}
}

// do sends one request with the given headers and returns its status, body and headers.
func (h *harness) do(method, path string, header map[string]string) (int, string, http.Header) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func (h *harness) token(ttl string) string {
	h.t.Helper()
	status, body, _ := h.do(http.MethodPut, tokenPath, map[string]string{TokenTTLHeader: ttl})
	if status != http.StatusOK || body == "" {
		h.t.Fatalf("token with TTL %s: %d %q", ttl, status, body)
	}
	return body
}

func (h *harness) get(path, token string) (int, string) {
	h.t.Helper()
	status, body, _ := h.do(http.MethodGet, path, map[string]string{TokenHeader: token})
	return status, body
}

// sdk is the AWS SDK's IMDS client on the fake, never falling back to IMDSv1. Its retries (after a 401 it
// renews its token and tries again) do not wait: the fake answers at once.
func (h *harness) sdk() *imds.Client {
	return imds.New(imds.Options{Endpoint: h.url, EnableFallback: aws.FalseTernary, Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})})
}

func TestDocumentedRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rules := map[string]func(t *testing.T){
		"R1": func(t *testing.T) {
			h := newHarness(t, Options{})
			for _, ttl := range []string{"", "0", "-1", "21601", "six hours", "1.5"} {
				header := map[string]string{}
				if ttl != "" {
					header[TokenTTLHeader] = ttl
				}
				if status, _, _ := h.do(http.MethodPut, tokenPath, header); status != http.StatusBadRequest {
					t.Errorf("token with TTL %q: %d, want 400", ttl, status)
				}
			}
			for _, ttl := range []string{"1", "21600"} {
				h.token(ttl)
			}
		},
		"R2": func(t *testing.T) {
			h := newHarness(t, Options{})
			status, body, header := h.do(http.MethodPut, tokenPath, map[string]string{TokenTTLHeader: "300"})
			if status != http.StatusOK || body == "" || header.Get(TokenTTLHeader) != "300" {
				t.Fatalf("token answer: %d %q, TTL header %q; want 200, a token, 300", status, body, header.Get(TokenTTLHeader))
			}
			// The SDK's client reads the header; without it no read succeeds.
			h.s.SetMetadata("instance-id", "i-0123456789abcdef0")
			out, err := h.sdk().GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(out.Content); string(b) != "i-0123456789abcdef0" {
				t.Errorf("SDK read %q", b)
			}
		},
		"R3": func(t *testing.T) {
			h := newHarness(t, Options{})
			status, _, _ := h.do(http.MethodPut, tokenPath, map[string]string{TokenTTLHeader: "60", "X-Forwarded-For": "203.0.113.9"})
			if status != http.StatusForbidden {
				t.Errorf("forwarded token request: %d, want 403", status)
			}
		},
		"R4": func(t *testing.T) {
			h := newHarness(t, Options{Role: "r"})
			h.s.SetUserData([]byte("#!/bin/sh\n"))
			for _, p := range []string{"/latest/meta-data/", "/latest/meta-data/iam/security-credentials/r", "/latest/user-data", "/latest/nothing"} {
				if status, _, _ := h.do(http.MethodGet, p, nil); status != http.StatusUnauthorized {
					t.Errorf("GET %s without a token: %d, want 401", p, status)
				}
			}
			if len(h.s.IssuedCredentials()) != 0 {
				t.Error("credentials were issued to a read without a token")
			}
		},
		"R5": func(t *testing.T) {
			h := newHarness(t, Options{})
			h.s.SetMetadata("instance-id", "i-1")
			if status, _ := h.get("/latest/meta-data/instance-id", "not-a-token"); status != http.StatusUnauthorized {
				t.Errorf("made-up token: %d, want 401", status)
			}
		},
		"R6": func(t *testing.T) {
			h := newHarness(t, Options{})
			h.s.SetMetadata("instance-id", "i-1")
			tok := h.token("60")
			h.clock.Advance(59 * time.Second)
			if status, _ := h.get("/latest/meta-data/instance-id", tok); status != http.StatusOK {
				t.Errorf("a token 59 s into its 60: %d, want 200", status)
			}
			h.clock.Advance(time.Second)
			if status, _ := h.get("/latest/meta-data/instance-id", tok); status != http.StatusUnauthorized {
				t.Errorf("a token at the end of its TTL: %d, want 401", status)
			}
			// The SDK renews its token on a 401 and reads on, whether the TTL ran out or every token was ended.
			c := h.sdk()
			for _, end := range []func(){func() { h.clock.Advance(6 * time.Hour) }, h.s.ExpireTokens} {
				if _, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"}); err != nil {
					t.Fatal(err)
				}
				end()
				if _, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"}); err != nil {
					t.Fatalf("SDK read after its token ended: %v", err)
				}
			}
		},
		"R7": func(t *testing.T) {
			h := newHarness(t, Options{})
			tok := h.token("60")
			if status, _, _ := h.do(http.MethodGet, tokenPath, map[string]string{TokenTTLHeader: "60"}); status != http.StatusMethodNotAllowed {
				t.Errorf("GET token: %d, want 405", status)
			}
			if status, _, _ := h.do(http.MethodPost, "/latest/meta-data/", map[string]string{TokenHeader: tok}); status != http.StatusMethodNotAllowed {
				t.Errorf("POST meta-data: %d, want 405", status)
			}
		},
		"R8": func(t *testing.T) {
			h := newHarness(t, Options{})
			tok := h.token("60")
			for _, p := range []string{"/latest/meta-data/nothing", "/latest/nothing", "/1.0/meta-data/"} {
				if status, _ := h.get(p, tok); status != http.StatusNotFound {
					t.Errorf("GET %s: %d, want 404", p, status)
				}
			}
			_, err := h.sdk().GetMetadata(ctx, &imds.GetMetadataInput{Path: "nothing"})
			var status interface{ HTTPStatusCode() int }
			if !errors.As(err, &status) || status.HTTPStatusCode() != http.StatusNotFound {
				t.Errorf("SDK read of a missing path: %v, want a 404", err)
			}
		},
		"R9": func(t *testing.T) {
			h := newHarness(t, Options{Role: "proxy-role"})
			mac := "0e:49:61:0f:c3:11"
			h.s.SetMetadata("network/interfaces/macs/"+mac+"/public-ipv4s", "203.0.113.7")
			h.s.SetMetadata("network/interfaces/macs/"+mac+"/local-ipv4s", "10.0.0.5")
			h.s.SetMetadata("instance-id", "i-1")
			tok := h.token("60")
			for path, want := range map[string]string{
				"/latest/meta-data/":                                                 "iam/\ninstance-id\nnetwork/",
				"/latest/meta-data/network/interfaces/macs/":                         mac + "/",
				"/latest/meta-data/network/interfaces/macs":                          mac + "/",
				"/latest/meta-data/network/interfaces/macs/" + mac + "/":             "local-ipv4s\npublic-ipv4s",
				"/latest/meta-data/network/interfaces/macs/" + mac + "/public-ipv4s": "203.0.113.7",
			} {
				if status, body := h.get(path, tok); status != http.StatusOK || body != want {
					t.Errorf("GET %s: %d %q, want %q", path, status, body, want)
				}
			}
		},
		"R10": func(t *testing.T) {
			h := newHarness(t, Options{})
			if status, _ := h.get("/latest/meta-data/iam/security-credentials/", h.token("60")); status != http.StatusNotFound {
				t.Errorf("credentials of an instance without a role: %d, want 404", status)
			}
			// Less than the hour the SDK's provider caps an expiry at, on its own clock.
			h = newHarness(t, Options{Role: "proxy-role", CredentialLifetime: 40 * time.Minute})
			if status, body := h.get("/latest/meta-data/iam/security-credentials/", h.token("60")); status != http.StatusOK || body != "proxy-role" {
				t.Errorf("role listing: %d %q", status, body)
			}
			// The SDK's credential provider reads the document.
			p := ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = h.sdk() })
			first, err := p.Retrieve(ctx)
			if err != nil {
				t.Fatal(err)
			}
			issued := h.s.IssuedCredentials()
			if len(issued) != 1 || first.AccessKeyID != issued[0].AccessKeyID || first.SessionToken != issued[0].Token ||
				first.SecretAccessKey != issued[0].SecretAccessKey || !first.Expires.Equal(h.clock.Now().Add(40*time.Minute)) {
				t.Fatalf("SDK credentials %+v, fake issued %+v", first, issued)
			}
			// The same until five minutes before they expire; new ones from then on.
			h.clock.Advance(35*time.Minute - time.Second)
			if again, err := p.Retrieve(ctx); err != nil || again.AccessKeyID != first.AccessKeyID {
				t.Errorf("5 min 1 s before expiry: %v %s, want the same credentials", err, again.AccessKeyID)
			}
			h.clock.Advance(time.Second)
			next, err := p.Retrieve(ctx)
			issued = h.s.IssuedCredentials()
			if err != nil || len(issued) != 2 || next.AccessKeyID != issued[1].AccessKeyID || !issued[1].Expiration.Equal(h.clock.Now().Add(40*time.Minute)) {
				t.Errorf("5 min before expiry: %v %+v, want new credentials for 40 minutes (issued %+v)", err, next, issued)
			}
		},
		"R11": func(t *testing.T) {
			h := newHarness(t, Options{})
			if status, _ := h.get(userDataPath, h.token("60")); status != http.StatusNotFound {
				t.Errorf("user-data of an instance without: %d, want 404", status)
			}
			h.s.SetUserData([]byte("#!/bin/sh\necho hi\n"))
			out, err := h.sdk().GetUserData(ctx, &imds.GetUserDataInput{})
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(out.Content); string(b) != "#!/bin/sh\necho hi\n" {
				t.Errorf("SDK read user-data %q", b)
			}
		},
	}
	for name, rule := range rules {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rule(t)
		})
	}
	// Every rule of README.md has its test, and no test names a rule the README does not have.
	readme, err := readmeRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readme {
		if rules[r] == nil {
			t.Errorf("README.md's %s has no test", r)
		}
	}
	if len(readme) != len(rules) {
		t.Errorf("README.md lists %d rules, the test %d", len(readme), len(rules))
	}
}

func readmeRules() ([]string, error) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "| R"); ok {
			n, _, _ := strings.Cut(rest, " ")
			out = append(out, "R"+n)
		}
	}
	return out, nil
}
