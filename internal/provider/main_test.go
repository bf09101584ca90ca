package provider

import (
	"os"
	"testing"
)

// TestMain lets the test binary double as the upstream servers of the end-to-end test: started again inside
// the test network namespace with EGRESS_E2E_UPSTREAM set, it serves there until killed.
func TestMain(m *testing.M) {
	if addr := os.Getenv(upstreamEnvVar); addr != "" {
		serveUpstreams(addr)
		return
	}
	os.Exit(m.Run())
}
