package mongolocktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

// awaitSlots waits until cond holds of the state of the Semaphore or
// RWLock called name, in the default collection (nil before its first
// use).
func awaitSlots(t *testing.T, s *Store, name, what string, cond func(e *entry) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.s.mu.Lock()
		ok := cond(s.s.names[key{mongolock.DefaultCollection + semSuffix, name}])
		s.s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s, of %q: %s", name, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// inLine waits until n Acquire calls wait in the line of name.
func inLine(t *testing.T, s *Store, name string, n int) {
	t.Helper()
	awaitSlots(t, s, name, fmt.Sprintf("%d in line", n), func(e *entry) bool { return e != nil && len(e.line) == n })
}

// twoProviders returns a context bounded for the test, a Store, and two
// providers of it, closed when the test ends.
func twoProviders(t *testing.T) (context.Context, *Store, *mongolock.Provider, *mongolock.Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s := NewStore()
	var ps [2]*mongolock.Provider
	for i := range ps {
		p, err := s.NewProvider()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(ctx)) })
		ps[i] = p
	}
	return ctx, s, ps[0], ps[1]
}

// A closing provider's waiting writer leaves the line first; the reader of
// the same provider behind it must get ErrClosed, not a handle released
// at once.
func TestCloseGivesEveryWaiterErrClosedEvenOneThatALeavingWriterLetsIn(t *testing.T) {
	ctx, s, p, other := twoProviders(t)
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
	for _, k := range []backend.Kind{backend.Unsupported, backend.Upgradeable + 1} {
		_, err := p.Acquire(context.Background(), backend.Lock{Name: "a", Kind: k}, false)
		require.ErrorIs(t, err, errUnsupported)
	}
	_, found := p.Inspect("a")
	require.False(t, found, "nothing was created")
}

// upgrading runs h's Upgrade with ctx in a goroutine; its error arrives on
// the channel.
func upgrading(ctx context.Context, h *mongolock.Handle) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.Upgrade(ctx) }()
	return ch
}

// acquired is an Acquire's outcome.
type acquired struct {
	h   *mongolock.Handle
	err error
}

// held returns the handle, or fails the test.
func (a acquired) held(t *testing.T) *mongolock.Handle {
	t.Helper()
	require.NoError(t, a.err)
	return a.h
}

// acquiring runs l's Acquire with ctx in a goroutine; its outcome arrives
// on the channel.
func acquiring(ctx context.Context, l *mongolock.Lock) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		h, err := l.Acquire(ctx)
		ch <- acquired{h, err}
	}()
	return ch
}

// awaitUpgradeWaiting waits until an upgrade of name waits for readers.
func awaitUpgradeWaiting(t *testing.T, s *Store, name string) {
	t.Helper()
	awaitSlots(t, s, name, "an upgrade waits", func(e *entry) bool { return e != nil && e.upgrade != nil })
}

// An upgradeable reader in line waits for the one that holds, not for
// readers: a reader behind it, held off by an upgrade, is let in once the
// upgrade gives up, and the upgradeable reader gets in once the first
// leaves.
func TestAReaderBehindAWaitingUpgradeableReaderGetsInWhenTheUpgradeGivesUp(t *testing.T) {
	ctx, s, p, _ := twoProviders(t)
	rw := p.RWLock("rw")
	u, err := rw.Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	r, err := rw.Reader().TryAcquire(ctx)
	require.NoError(t, err)
	second := acquiring(ctx, rw.Upgradeable())
	inLine(t, s, "rw", 1)
	uctx, stop := context.WithCancel(ctx)
	upgraded := upgrading(uctx, u)
	awaitUpgradeWaiting(t, s, "rw")
	reader := acquiring(ctx, rw.Reader())
	inLine(t, s, "rw", 2)
	stop()
	require.ErrorIs(t, <-upgraded, context.Canceled)
	r2 := (<-reader).held(t)
	inLine(t, s, "rw", 1) // the second upgradeable reader waits still
	for _, h := range []*mongolock.Handle{u, r, r2} {
		require.NoError(t, h.Release(ctx))
	}
	u2 := (<-second).held(t)
	require.NoError(t, u2.Upgrade(ctx))
	require.NoError(t, u2.Release(ctx))
}

// A second Upgrade of a handle whose first waits is refused, and Close
// ends the waiting one with ErrClosed: the provider released its handle.
func TestCloseEndsAWaitingUpgradeWithErrClosed(t *testing.T) {
	ctx, s, p, other := twoProviders(t)
	u, err := p.RWLock("rw").Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	r, err := other.RWLock("rw").Reader().TryAcquire(ctx)
	require.NoError(t, err)
	upgraded := upgrading(ctx, u)
	awaitUpgradeWaiting(t, s, "rw")
	require.ErrorContains(t, u.Upgrade(ctx), "another Upgrade or Downgrade of the handle is under way")
	require.NoError(t, p.Close(ctx))
	require.ErrorIs(t, <-upgraded, mongolock.ErrClosed)
	info, err := other.RWLock("rw").Inspect(ctx)
	require.NoError(t, err)
	require.False(t, info.WriterWaiting)
	require.Len(t, info.Holders, 1, "the reader alone")
	require.NoError(t, r.Release(ctx))
}

// A downgrade lets in at once the reader that waits in line, and keeps the
// writer in line behind it out until the readers leave.
func TestDowngradeLetsTheReaderInLineInAndKeepsTheWriterBehindItOut(t *testing.T) {
	ctx, s, p, other := twoProviders(t)
	w, err := p.RWLock("rw").Writer().TryAcquire(ctx)
	require.NoError(t, err)
	reader := acquiring(ctx, other.RWLock("rw").Reader())
	inLine(t, s, "rw", 1)
	writer := acquiring(ctx, other.RWLock("rw").Writer())
	inLine(t, s, "rw", 2)
	require.NoError(t, w.Downgrade(ctx))
	r := (<-reader).held(t)
	inLine(t, s, "rw", 1) // the writer
	require.NoError(t, w.Release(ctx))
	require.NoError(t, r.Release(ctx))
	w2 := (<-writer).held(t)
	require.Greater(t, w2.FencingToken(), r.FencingToken())
	require.NoError(t, w2.Release(ctx))
}
