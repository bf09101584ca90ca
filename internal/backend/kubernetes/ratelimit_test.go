package kubernetes

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestRateLimitSettings(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		cluster   ClusterConfig
		wantQPS   float32
		wantBurst int
	}{
		"defaults sized for a provider process": {wantQPS: DefaultRequestsPerSecond, wantBurst: DefaultRequestBurst},
		"the cluster's own":                     {cluster: ClusterConfig{RequestsPerSecond: 7, RequestBurst: 3}, wantQPS: 7, wantBurst: 3},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cc := tt.cluster
			cc.Host, cc.Token = "https://127.0.0.1:1", "t"
			rc, err := cc.restConfig()
			if err != nil {
				t.Fatal(err)
			}
			if rc.QPS != tt.wantQPS || rc.Burst != tt.wantBurst {
				t.Errorf("QPS %v, burst %d; want %v, %d", rc.QPS, rc.Burst, tt.wantQPS, tt.wantBurst)
			}
		})
	}
	if err := (Config{Clusters: map[string]ClusterConfig{"c": {RequestsPerSecond: -1}}}).validate(); err == nil {
		t.Error("a negative requests_per_second was accepted")
	}
}

// TestRetryAfterIsHonoured: an API server that sheds load (API Priority and Fairness answers 429 Too Many
// Requests with Retry-After) is asked again once the time it named has passed, by the real client over HTTP.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"too many requests, please try again later"}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":"p1","group":"apps","kind":"deployments"}}`))
	}))
	t.Cleanup(srv.Close)
	b, err := New(Config{Clusters: map[string]ClusterConfig{"test": {Host: srv.URL, Token: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(testCtx(t), testID()); err != nil {
		t.Fatalf("Delete after a 429: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("the server saw %d requests, want the refused one and its retry", len(at))
	}
	if waited := at[1].Sub(at[0]); waited < time.Second {
		t.Errorf("retried after %v, before the Retry-After of 1s", waited)
	}
}
