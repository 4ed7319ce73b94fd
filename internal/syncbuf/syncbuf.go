// Package syncbuf is a buffer that several goroutines may write to at once:
// for tests that collect a child process's output, or a logger's.
package syncbuf

import (
	"strings"
	"sync"
)

// A Buffer collects what is written to it, from any goroutine. The zero
// value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
