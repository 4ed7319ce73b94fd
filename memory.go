package mongolock

import (
	"context"
	"fmt"

	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/memdb"
)

// Providers over a database in process memory.
//
// Package mongolocktest builds Providers whose statements are applied to
// a memdb.Store (memStore) instead of sent to a server: the engine is the
// one that runs over MongoDB, with every statement, lease, line and
// clock of its own. It reaches them, and the mongolock command a Handle's
// internals, through internal/backend, so that this package exports
// nothing for them.

func init() {
	backend.NewProvider = func(s memdb.Conn, db string, opts any) (any, error) {
		return newMemProvider(s, db, opts.([]Option)) // a nil *Provider on an error
	}
	backend.Lose = func(h any) bool {
		hh, ok := h.(*Handle)
		if !ok || hh == nil || hh.acquisition == nil {
			return false
		}
		if _, ok := hh.lock.collection().store.(memStore); !ok {
			return false
		}
		hh.lose()
		return true
	}
	backend.ReleaseUnused = func(ctx context.Context, h any) error { return h.(*Handle).releaseUnused(ctx) }
	backend.LossOf = func(h any) error { return h.(*Handle).lossError() }
	backend.TicketHolder = func(ticket string) (string, string, bool) {
		t, err := parseTicket(ticket)
		return t.Name, t.ID, err == nil
	}
}

// lose ends a's acquisition as a force release of its holder does, and
// signals the loss at once, as the extension that finds it ended would.
// A handle released or lost already is left as it is.
func (a *acquisition) lose() {
	if a.released.Load() || a.lossError() != nil {
		return
	}
	// Ended in the store: a waiter takes the lock at its next attempt. In
	// a partition the holder stays until its lease ends, as on a server.
	_, _ = a.lock.p.ForceReleaseHolder(context.Background(), a.lock.name, a.lockID)
	if a.lock.p.leases.forget(a) != nil {
		a.markLost(lossTakenOver, fmt.Errorf("%w: its holder was force released (mongolocktest.Lose)", ErrLockLost))
	}
}
