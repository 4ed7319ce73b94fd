package mongolock_test

// A Handle's end (release.go) over a database in process memory, in
// simulated time (memDB in a testing/synctest bubble).

import (
	"testing"
	"testing/synctest"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A lost handle that a test in a synctest bubble leaves unreleased is
// collected after the bubble has ended, by the garbage collector's
// cleanup, which runs outside every bubble: it must touch nothing of the
// bubble's (a channel made there is fatal to use from outside).
func TestAnAbandonedLostHandleIsCollectedOutsideItsBubbleWithoutHarm(t *testing.T) {
	var h *mongolock.Handle
	synctest.Test(t, func(t *testing.T) {
		d := newMemDB(t)
		p, _ := d.process()
		h = mustTryAcquire(t, t.Context(), p.Lock("abandoned"))
		mongolocktest.Lose(h)
	})
	mongolock.Abandon(h)
}
