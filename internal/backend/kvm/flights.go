package kvm

import (
	"context"
	"sync"
)

// flights runs one function per key at a time; callers arriving meanwhile share its result. A caller whose
// own ctx ends stops waiting. When the running function failed only because its caller's ctx ended, the
// others run it again themselves rather than inherit a cancellation that was not theirs.
type flights[T any] struct {
	mu sync.Mutex
	m  map[string]*flight[T]
}

type flight[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func (g *flights[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (T, error) {
	for {
		g.mu.Lock()
		if g.m == nil {
			g.m = map[string]*flight[T]{}
		}
		if f, ok := g.m[key]; ok {
			g.mu.Unlock()
			select {
			case <-f.done:
				if isCtxErr(f.err) && ctx.Err() == nil {
					continue
				}
				return f.val, f.err
			case <-ctx.Done():
				var zero T
				return zero, ctx.Err()
			}
		}
		f := &flight[T]{done: make(chan struct{})}
		g.m[key] = f
		g.mu.Unlock()

		f.val, f.err = fn(ctx)
		g.mu.Lock()
		delete(g.m, key)
		g.mu.Unlock()
		close(f.done)
		return f.val, f.err
	}
}
