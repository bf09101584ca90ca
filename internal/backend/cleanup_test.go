package backend

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflogtest"
)

func TestCleanupContextOutlivesItsCallerButEnds(t *testing.T) {
	t.Parallel()
	caller, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKeyForTest{}, "kept"))
	cancel() // Ctrl-C: the clean-up must still run
	ctx, stop := CleanupContext(caller)
	defer stop()
	if err := ctx.Err(); err != nil {
		t.Fatalf("the clean-up context ended with its caller: %v", err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		t.Fatal("the clean-up context has no deadline: a failing clean-up would never return")
	}
	if left := time.Until(deadline); left > CleanupTimeout || left <= 0 {
		t.Errorf("deadline in %v, want within %v", left, CleanupTimeout)
	}
	if ctx.Value(ctxKeyForTest{}) != "kept" {
		t.Error("the clean-up context lost the caller's values (log subsystem, ownership)")
	}
}

type ctxKeyForTest struct{}

func TestBestEffortIsHeard(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err      error
		wantWarn bool
	}{
		"failed step":            {err: Transient("configmap egress/p", "connection refused"), wantWarn: true},
		"unclassified error":     {err: errors.New("boom"), wantWarn: true},
		"nothing to remove":      {err: NotFound("configmap egress/p", "is gone"), wantWarn: false},
		"step that went through": {err: nil, wantWarn: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			ctx := Subsystem(tflogtest.RootLogger(t.Context(), &logs), "kubernetes")
			BestEffort(ctx, "kubernetes", "delete configmap egress/p", tc.err)
			entries, err := tflogtest.MultilineJSONDecode(&logs)
			if err != nil {
				t.Fatal(err)
			}
			warned := false
			for _, e := range entries {
				if e["@level"] == "warn" && e["step"] == "delete configmap egress/p" && tc.err != nil && e["error"] == tc.err.Error() {
					warned = true
				}
			}
			if warned != tc.wantWarn {
				t.Errorf("warned %v, want %v; log: %v", warned, tc.wantWarn, entries)
			}
		})
	}
}
