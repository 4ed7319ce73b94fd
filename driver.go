package mongolock

import (
	"cmp"
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A kindDriver is one kind of lock. Lock is the engine: it acquires, waits,
// hands over, extends and releases, and asks the driver only what to send
// and how to read the reply. Drivers of one collection share the format of its
// documents: extensions of both are batched together.
type kindDriver interface {
	// collection is where the kind's documents are.
	collection(p *Provider) *lockCollection
	// create is the free document of a name never used.
	create(name string) bson.D
	// acquire sends one acquisition, or a hand-over from a.releasing.
	acquire(ctx context.Context, p *Provider, name string, a attempt) (reply, error)
	// release is the owner-checked release of id's acquisition, held
	// until hold after it (WithHoldAtLeast) if holdsApply.
	release(name, id string, hold time.Duration) (filter bson.D, update any)
	// extend is the owner-checked extension of a batch, and holders the
	// query that tells its lost handles when it matched too few, and
	// which of them were taken over by ticket.
	extend(lockUpdate bson.A, expiry time.Duration, names, ids bson.A) (filter bson.D, update any)
	holders(names bson.A) (filter, projection bson.D)
	// heldBy reads one document of holders' reply into seen.
	heldBy(doc bson.Raw, seen holderIDs) error
	// limit is how many handles of one process may hold the name at once
	// (0: any number); an exclusive handle keeps every other out.
	limit() (n int, exclusive bool)
	// unclaimed reports whether acquire takes an unclaimedMode attempt.
	unclaimed() bool
	// holdsApply reports whether the hold options (WithHoldAtLeast,
	// WithHoldAtMost) apply to the kind.
	holdsApply() bool
	// describe says what the kind is, for inspection, telemetry and a
	// composite's order.
	describe() kindInfo
}

// holderIDs are what a holders statement's reply says of acquisitions,
// by lock id: those that hold, and those that a take-over by ticket took
// (the documents keep the last ones taken).
type holderIDs struct{ held, takenOver map[string]bool }

// kindInfo is what a kind says of itself.
type kindInfo struct {
	kind     Kind
	mode     rwMode // a reader-writer lock's; 0 for the other kinds
	modeName string // mode's name in telemetry
	modePart string // the kind's name in a composite's order and its errors, if not kind's
	slots    int    // a semaphore's; 0 for the other kinds
	units    int    // the slots a semaphore's acquisition takes; 0 for the other kinds
}

// part names the kind in a composite's order and its errors.
func (k kindInfo) part() string { return cmp.Or(k.modePart, string(k.kind)) }
