package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// env is one subtest's: its providers share a database.
type env struct {
	t    *testing.T
	open func(opts ...mongolock.Option) (*mongolock.Provider, error)
	ctx  context.Context
	// settle lets what the case started run as far as it can before a
	// check that it waits (synctest.Wait in a bubble; nothing on the real
	// clock, where the check is only as strong as the moment it runs).
	settle func()
}

// provider returns a provider with short expiries (a loss is seen within
// a third of a second) and quick polls, then opts; closed when the test
// ends.
func (e *env) provider(opts ...mongolock.Option) *mongolock.Provider {
	e.t.Helper()
	p, err := e.open(append([]mongolock.Option{mongolock.WithExpiry(time.Second), mongolock.WithBusyWaitSleep(5*time.Millisecond, 50*time.Millisecond)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(e.t, p.Close(ctx))
	})
	return p
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes l, or fails the test.
func (e *env) acquire(l *mongolock.Lock) *mongolock.Handle {
	e.t.Helper()
	h, err := l.Acquire(e.ctx)
	require.NoError(e.t, err)
	return h
}

func (e *env) release(h *mongolock.Handle) {
	e.t.Helper()
	require.NoError(e.t, h.Release(e.ctx))
}

// await waits for ch to close, or fails the test.
func (e *env) await(ch <-chan struct{}, what string) {
	e.t.Helper()
	select {
	case <-ch:
	case <-e.ctx.Done():
		e.t.Fatalf("not before the test's deadline: %s", what)
	}
}

// notLost fails the test if h's Lost is closed.
func (e *env) notLost(h *mongolock.Handle, why string) {
	e.t.Helper()
	select {
	case <-h.Lost():
		e.t.Fatal(why)
	default:
	}
}

// requireFree checks that l can be taken at once, and releases it.
func (e *env) requireFree(l *mongolock.Lock, why string) {
	e.t.Helper()
	h, err := l.TryAcquire(e.ctx)
	require.NoError(e.t, err, why)
	e.release(h)
}

// ended returns a context that has ended.
func (e *env) ended() context.Context {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	return ctx
}

// pollUntil waits until cond holds, or fails the test.
func (e *env) pollUntil(what string, cond func() bool) {
	e.t.Helper()
	for !cond() {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-e.ctx.Done():
			e.t.Fatalf("not before the test's deadline: %s", what)
		}
	}
}

// result is an Acquire's outcome, from a goroutine.
type result struct {
	h   *mongolock.Handle
	err error
}

// start runs acquire in a goroutine; its result arrives on the channel.
func start(acquire func() (*mongolock.Handle, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := acquire()
		ch <- result{h, err}
	}()
	return ch
}

// notYet fails the test if ch has delivered: it must wait.
func (e *env) notYet(ch <-chan result, what string) {
	e.t.Helper()
	e.settle()
	select {
	case r := <-ch:
		e.t.Fatalf("%s returned before the release: %v, %v", what, r.h, r.err)
	default:
	}
}

func (e *env) receive(ch <-chan result) *mongolock.Handle {
	e.t.Helper()
	select {
	case r := <-ch:
		require.NoError(e.t, r.err)
		return r.h
	case <-e.ctx.Done():
		e.t.Fatal("the waiting Acquire did not return")
		return nil
	}
}

// requireOp checks that err is an *Error of operation op.
func requireOp(t *testing.T, err error, op string) {
	t.Helper()
	var me *mongolock.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, op, me.Op)
}
