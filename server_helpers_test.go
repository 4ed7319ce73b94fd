package mongolock_test

// Fixtures of the server tier for a real clock on a loaded machine, where a
// context's deadline is a bound for failing, never for passing.

import (
	"context"
	"testing"
	"time"
)

// endOnceAnswered runs call, an acquisition, with a context that is
// cancelled once count has seen the replies to two of its attempts, and
// returns call's error: a wait that ends while the lock is known to be
// held. A short deadline could end it before any reply, when nothing is
// known about the lock (on a loaded machine the driver does not even send
// a request that cannot finish in time). Two: the first may be the cheaper
// statement's refusal, which claims nothing and is followed at once by the
// claim, whose reply says the lock is held.
func endOnceAnswered(t *testing.T, ctx context.Context, count *commandCounter, call func(context.Context) error) error {
	t.Helper()
	replies := count.replies.Load()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- call(cctx) }()
	pollUntil(t, 20*time.Second, "replies to two acquisition attempts", func() bool {
		return count.replies.Load() >= replies+2 || len(got) > 0
	})
	cancel()
	return <-got
}
