package aws

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// closingBody plays the SDK's request body as net/http meets it when the SDK closes it early: once its
// bytes are read it counts as closed (the SDK's Close landing before net/http's last read), and, like the
// SDK's wrapper, its WriteTo then answers io.EOF.
type closingBody struct {
	mu     sync.Mutex
	r      *bytes.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if b.r.Len() == 0 {
		b.closed = true
	}
	return n, err
}

func (b *closingBody) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.WriteTo(w)
}

func (b *closingBody) Close() error { return nil }

// TestReadOnlyBodiesSurviveAnEarlyClose: a body closed between net/http's write of its bytes and its check
// that nothing is left must not break the connection the answer is read from. Without readOnlyBodies every
// request here fails, at the write or while its answer is read.
func TestReadOnlyBodiesSurviveAnEarlyClose(t *testing.T) {
	t.Parallel()
	answer := strings.Repeat("<item>answer</item>", 2000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	for name, client := range map[string]awssdk.HTTPClient{
		"an http.Client":           readOnlyBodies{base: srv.Client()},
		"the SDK's default client": readOnlyBodies{base: awshttp.NewBuildableClient()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := range 20 {
				payload := []byte("Action=DescribeInstances&Version=2016-11-15")
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, &closingBody{r: bytes.NewReader(payload)})
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = int64(len(payload))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				got, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || string(got) != answer {
					t.Fatalf("request %d: read %d bytes, %v", i, len(got), err)
				}
			}
		})
	}
}

// Without a client of ours and without AWS_CA_BUNDLE (a user's usual machine), loading the SDK's configuration
// leaves its client nil; the wrapper must carry a real client then, or the first request panics.
func TestSDKConfigCarriesRequestsWithoutAClientOrCABundle(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer server.Close()
	cfg, err := Config{}.sdkConfig(t.Context(), "eu-west-1", RegionConfig{AccessKey: "AKIDEXAMPLE", SecretKey: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, server.URL, strings.NewReader("Action=DescribeRegions"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cfg.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d, want %d", resp.StatusCode, http.StatusNoContent)
	}
}
