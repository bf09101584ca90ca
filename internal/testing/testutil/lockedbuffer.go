// Package testutil holds small helpers shared by the tests of several packages.
package testutil

import (
	"bytes"
	"sync"
)

// LockedBuffer collects a child process's output while the test reads it: exec copies into it from its own
// goroutine, so a plain bytes.Buffer would race with the test's reads.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
