package mongolock_test

// Fixtures of the server tier for a real clock on a loaded machine, where a
// context's deadline is a bound for failing, never for passing.

import (
	"context"
	"testing"
	"time"
)

// endOnceAnswered runs call with a context that is cancelled once count has
// seen a reply to an acquisition attempt made after call started, and
// returns call's error: a wait that ends while the lock is known to be held.
// A short deadline could end it before any reply, when nothing is known
// about the lock (on a loaded machine the driver does not even send a
// request that cannot finish in time).
func endOnceAnswered(t *testing.T, ctx context.Context, count *commandCounter, call func(context.Context) error) error {
	t.Helper()
	replies := count.replies.Load()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- call(cctx) }()
	pollUntil(t, 20*time.Second, "a reply to an acquisition attempt", func() bool {
		return count.replies.Load() > replies || len(got) > 0
	})
	cancel()
	return <-got
}
