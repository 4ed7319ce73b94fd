package mongolocktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

// inLine waits until n Acquire calls wait in the line of the Semaphore or
// RWLock called name, in the default collection.
func inLine(t *testing.T, s *Store, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.s.mu.Lock()
		e := s.s.names[key{mongolock.DefaultCollection + semSuffix, name}]
		got := 0
		if e != nil {
			got = len(e.line)
		}
		s.s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d in line for %q, not %d", got, name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A closing provider's waiting writer leaves the line first; the reader of
// the same provider behind it must get ErrClosed, not a handle released
// at once.
func TestCloseGivesEveryWaiterErrClosedEvenOneThatALeavingWriterLetsIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := NewStore()
	p, err := s.NewProvider()
	require.NoError(t, err)
	other, err := s.NewProvider()
	require.NoError(t, err)
	defer other.Close(ctx)
	r, err := other.RWLock("rw").Reader().Acquire(ctx)
	require.NoError(t, err)
	errs := make(chan error, 2)
	acquire := func(l *mongolock.Lock) {
		_, err := l.Acquire(ctx)
		errs <- err
	}
	go acquire(p.RWLock("rw").Writer())
	inLine(t, s, "rw", 1)
	go acquire(p.RWLock("rw").Reader())
	inLine(t, s, "rw", 2)
	require.NoError(t, p.Close(ctx))
	for range 2 {
		require.ErrorIs(t, <-errs, mongolock.ErrClosed)
	}
	require.NoError(t, r.Release(ctx))
}

// A kind the root package asks for that the store does not implement yet
// is refused with an error that says so, never taken as a Lock.
func TestAKindNotImplementedIsRefused(t *testing.T) {
	p := newStore().provider(backend.Config{Collection: "c", Owner: "o", Expiry: time.Second})
	for _, k := range []backend.Kind{backend.Unsupported, backend.Writer + 1} {
		_, err := p.Acquire(context.Background(), backend.Lock{Name: "a", Kind: k}, false)
		require.ErrorIs(t, err, errUnsupported)
	}
	_, found := p.Inspect("a")
	require.False(t, found, "nothing was created")
}
