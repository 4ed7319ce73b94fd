package mongolock

import "time"

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
