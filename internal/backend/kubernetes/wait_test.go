package kubernetes

import (
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// TestWaitSurvivesClosedAndExpiredWatches hands the wait watches that the test drives: one the server closes
// (it must be opened again from the last resourceVersion), one that reports 410 Gone (the wait must list
// again), and a third that finally delivers the available Deployment.
func TestWaitSurvivesClosedAndExpiredWatches(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		// end finishes the first watch: a close or a 410 Gone event.
		end       func(w *watch.FakeWatcher)
		wantLists int
		wantRV    string
	}{
		"closed by the server": {end: func(w *watch.FakeWatcher) { w.Stop() }, wantLists: 1, wantRV: "7"},
		"resourceVersion gone": {end: func(w *watch.FakeWatcher) {
			w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
		}, wantLists: 2},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pending := readyDeployment("p1")
			pending.Status.AvailableReplicas, pending.Status.Conditions = 0, nil
			_, cs := newFake(t, pending)
			var mu sync.Mutex
			var rvs []string
			lists := 0
			cs.PrependReactor("list", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				lists++
				mu.Unlock()
				return false, nil, nil
			})
			watchers := make(chan *watch.FakeWatcher, 3)
			cs.PrependWatchReactor("deployments", func(a k8stesting.Action) (bool, watch.Interface, error) {
				mu.Lock()
				if w, ok := a.(k8stesting.WatchActionImpl); ok {
					rvs = append(rvs, w.WatchRestrictions.ResourceVersion)
				}
				mu.Unlock()
				w := watch.NewFakeWithChanSize(4, false)
				watchers <- w
				return true, w, nil
			})
			cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
				return true, watch.NewFake(), nil // no pod ever fails here
			})
			done := make(chan error, 1)
			go func() { _, err := waitRollout(ctx, &client{cs: cs}, testID()); done <- err }()

			first := <-watchers
			still := pending.DeepCopy()
			still.ResourceVersion = "7"
			first.Modify(still) // progress, not ready: the wait goes on
			tt.end(first)
			second := <-watchers
			ready := readyDeployment("p1")
			ready.ResourceVersion = "9"
			second.Modify(ready)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if lists != tt.wantLists {
				t.Errorf("%d lists, want %d", lists, tt.wantLists)
			}
			if tt.wantRV != "" && (len(rvs) < 2 || rvs[1] != tt.wantRV) {
				t.Errorf("watches opened at resourceVersions %q, want the second at %q", rvs, tt.wantRV)
			}
		})
	}
}
