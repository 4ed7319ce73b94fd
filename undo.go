package mongolock

// Undoing in the background what no caller will keep: an acquisition
// nobody got a handle for, a claim whose maker left, a mark of a failed
// upgrade.

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Schedules for releaseInBackground. Once an acquisition's reply has
// arrived, one try does. Without the reply, the request may still be on its
// way to the server, and a release on another connection can overtake it:
// the release is repeated for a while.
var (
	afterReply   = []time.Duration{0}
	afterNoReply = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond}
)

// undoSchedule is the schedule of the undo of a request that failed with
// err: repeated if no reply came, as the request may still be in flight.
func undoSchedule(err error) []time.Duration {
	if isReply(err) {
		return afterReply
	}
	return afterNoReply
}

// releaseInBackground releases lockID's acquisition of l, if it holds it,
// without waiting: for acquisitions nobody will get a handle for, and for a
// Release whose round trip failed. It is owner-checked, so it can never free
// someone else's acquisition. It stops once a try matches
// (updateInBackground). It holds the lock until hold after its acquisition
// (WithHoldAtLeast's, for a handle's release). An orphan (an acquisition
// nobody got a handle for, so nobody used it: hold 0) is counted and
// logged as it is released.
func (l *Lock) releaseInBackground(lockID string, schedule []time.Duration, hold time.Duration, orphan bool) {
	filter, update := l.kind.release(l.name, lockID, hold)
	l.updateInBackground(filter, update, schedule, func() bool {
		if orphan {
			l.p.tel.orphanReleased(l)
		}
		return true
	})
}

// updateInBackground sends updateOne(filter, update) to l's collection
// without waiting. It tries after each wait of schedule, and again after a
// short, growing backoff while a try fails transiently; it stops once a try
// matches and matched returns true, an error is not transient (the client
// closed), or cleanupTimeout has passed.
func (l *Lock) updateInBackground(filter bson.D, update any, schedule []time.Duration, matched func() bool) {
	l.p.background(cleanupTimeout+schedule[0], func(ctx context.Context) { // a delayed schedule's time to wait too
		for _, wait := range schedule {
			for retry := 20 * time.Millisecond; ; retry = min(2*retry, 500*time.Millisecond) {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
				n, _, err := l.collection().store.updateOne(ctx, filter, update)
				if err == nil && n > 0 && matched() || err != nil && !isTransient(err) {
					return
				}
				if err == nil {
					break // no match: try again at the schedule's next wait, if any
				}
				l.p.tel.retrying(l, err)
				wait = retry
			}
		}
	})
}

// withdraw removes this process's claim on l's next turn, and its place as
// next after another's, in the background, then wakes the head of its line,
// if any, to claim again: a claim is its maker's, and must not outlive it.
func (l *Lock) withdraw() {
	l.p.background(cleanupTimeout, func(ctx context.Context) { _ = l.withdrawNow(ctx) })
}
