package mongolock

import (
	"encoding/base64"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A ticket's contents and encoding, and the take-over statements.

// A ticket's contents: what a taker needs of an acquisition. Its encoding is
// ticketPrefix, then the BSON document, base64url without padding: the
// prefix carries the format's version, and lets a secret scanner find a
// ticket that leaked.
type ticketContents struct {
	Kind       Kind   `bson:"k"`
	Database   string `bson:"d"`
	Collection string `bson:"c"` // the provider's collection (WithCollection)
	Name       string `bson:"n"`
	ID         string `bson:"i"`           // the acquisition's lockId, a slot's holder id
	Mode       string `bson:"m,omitempty"` // an RWLock's: the mode of its Lock (Reader, Writer, Upgradeable)
	// A semaphore's n and the acquisition's units: the taker's Lock is
	// of them, and its telemetry names them from the take-over's start.
	Slots int `bson:"s,omitempty"`
	Units int `bson:"u,omitempty"`
}

const ticketPrefix = "mlt1_"

// encode is the ticket of t.
func (t ticketContents) encode() string {
	return ticketPrefix + base64.RawURLEncoding.EncodeToString(mustMarshal(bson.D{
		{Key: "k", Value: t.Kind}, {Key: "d", Value: t.Database}, {Key: "c", Value: t.Collection}, {Key: "n", Value: t.Name},
		{Key: "i", Value: t.ID}, {Key: "m", Value: t.Mode}, {Key: "s", Value: t.Slots}, {Key: "u", Value: t.Units}}))
}

// ticketContents is what a's ticket says.
func (a *acquisition) ticketContents() ticketContents {
	k, lc := a.lock.kind.describe(), a.lock.p.locks
	t := ticketContents{Kind: k.kind, Database: lc.db, Collection: lc.name, Name: a.lock.name, ID: a.lockID, Slots: k.slots, Units: k.units}
	if k.mode != 0 {
		t.Mode = string(k.mode)
	}
	return t
}

// 27. Take over a lock's or an election's acquisition by its ticket:
// findOneAndUpdate(ownerFilter(name, the ticket's lockId),
// takeOverPipeline, returnDocument: after). While the acquisition is live
// (expiresAt after $$NOW), it is the taker's: the fields an acquisition
// writes, with a fresh lockId, lease and owner, the next fencing token, and
// value if given (an election's successor's), else the value it had; and
// takenOverLockId, the lockId it took (which stays until the next
// take-over), for the old holder to tell a hand-off from a loss. Its
// process is the last (lastProcess, lastLockId), at the end of a turn
// (processStreak at least turn): a live claim of another process is met at
// its release. Claims and places as next stay. An acquisition that is not
// live is left as it is. One expression, as (2a).
func takeOverPipeline(proc, owner string, expiry time.Duration, lockID string, value *string, turn int) bson.A {
	v := any("$value") // missing stays missing: an object leaves it out
	if value != nil {
		v = literal(*value)
	}
	fields := acquiredFields(proc, owner, expiry, lockID, v, true)
	for i, f := range fields {
		if f.Key == "processStreak" {
			fields[i].Value = op("$max", op("$add", ifNull("$processStreak", 0), 1), turn)
		}
	}
	fields = append(fields, bson.E{Key: "takenOverLockId", Value: "$lockId"}) // the filter's: the ticket's
	return bson.A{obj("$replaceWith", cond(future("$expiresAt"), op("$mergeObjects", "$$ROOT", fields), "$$ROOT"))}
}

// 28. Take over a slot of a semaphore or an RWLock by its ticket:
// findOneAndUpdate(semHolderFilter(name, taking), slotTakeOverPipeline,
// returnDocument: after, fields: takeOverReplyFields(id)). While holder
// taking is live, it is replaced with holder id, the taker's, in the same
// mode, with a fresh lease and the next fencing token, after the others,
// as an acquisition appends its holder; an upgrade's mark on it is
// dropped; its id is appended to takenOverIds, which keeps the last
// takenOverKept, for the old holder to tell a hand-off from a loss. The
// claim stays. A holder that is not live is left as it is.
func slotTakeOverPipeline(id, taking, owner string, expiry time.Duration) bson.A {
	const now, old = "$$NOW", "$_taken"
	until := op("$add", now, expiry.Milliseconds())
	holder := obj("id", id, "owner", literal(owner), "mode", "$$this.mode", "acquiredAt", now, "expiresAt", until, "token", nextToken)
	live := filterOf(ifNull("$holders", bson.A{}), op("$and", op("$eq", "$$this.id", taking), op("$gt", "$$this.expiresAt", now)))
	took := op("$gt", op("$size", old), 0)
	others := filterOf("$holders", op("$ne", "$$this.id", taking))
	return bson.A{set("_taken", live), set(
		"holders", cond(took, op("$concatArrays", others, obj("$map", obj("input", old, "in", holder))), "$holders"),
		"fencingToken", cond(took, nextToken, "$fencingToken"),
		"expiresAt", cond(took, op("$max", ifNull("$expiresAt", epoch), until), "$expiresAt"),
		"lastWrite", cond(took, wroteAcquire, "$lastWrite"),
		"takenOverIds", cond(took, op("$slice", op("$concatArrays", ifNull("$takenOverIds", bson.A{}), bson.A{literal(taking)}), -takenOverKept), "$takenOverIds"),
		"_taken", "$$REMOVE")}
}

// takenOverKept is how many of the slots taken over by ticket a document
// records: each old holder reads it at its next extension or release,
// within an extension cadence, and several take-overs may come meanwhile.
const takenOverKept = 32

// takeOverReplyFields return, of the document after a slot's take-over,
// its n (the ticket says it too) and the taker's holder, if it took one.
func takeOverReplyFields(id string) bson.D {
	return obj("n", 1, "holders", obj("$elemMatch", obj("id", id)))
}
