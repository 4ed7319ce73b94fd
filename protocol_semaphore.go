package mongolock

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A semaphore's statements, which an RWLock's slots share
// (protocol_rwlock.go). A semaphore of n slots is one document in the
// collection "<collection>_semaphores", apart from the locks, so that
// neither DistributedLock.MongoDB nor a Lock of the same name can mistake
// it for a lock:
//
//	{_id: name, kind: "semaphore", n,
//	 holders: [{id, owner, acquiredAt, expiresAt, token}],
//	 fencingToken, expiresAt, waitingProcess, waitingSince, waitingUntil,
//	 waitingUnits, releasedAt, lastWrite}
//
// At most n holders are live (expiresAt after the server's $$NOW) at any
// server instant: an acquisition drops the expired holders and adds itself
// only if fewer than n remain. n is the document's while anyone holds a
// slot; an acquisition with another n is refused, and one that finds no
// live holder sets n to its own. The top-level expiresAt is never before a
// live holder's: the TTL index deletes an idle document as it does a lock's.
//
// An acquisition of k units (Semaphore.Units) is one holder written as k
// entries of holders, alike to the last field: n bounds the entries, so
// every statement that counts, extends, releases, hands over or takes over
// a holder by its id moves its units with it, and the document holds at
// most n entries, as with slots. A claim keeps waitingUnits free for its
// process (a claim without the field: one).

// createSemDoc: create a semaphore, insertOne, as a lock's.
func createSemDoc(name string, n int) bson.D {
	return obj("_id", name, "kind", "semaphore", "n", n, "holders", bson.A{}, "expiresAt", epoch)
}

// slotAttempt is what slotPipeline needs of one attempt.
type slotAttempt struct {
	id, releasing string // releasing: the holder handed over from (handOverMode)
	waitToken     int64  // the token its line saw when it began to wait
	proc, owner   string
	n             int    // a semaphore's slots
	units         int    // a semaphore's units taken (0: one); an RWLock's: 0
	rw            rwMode // an RWLock's mode; 0 for a semaphore
	mode          attemptMode
	expiry, claim time.Duration
}

// slotPipeline: acquire a slot, or hand one over,
// findOneAndUpdate({_id: name}, slotPipeline, returnDocument: after,
// fields: slotReplyFields); a hand-over's filter is semHolderFilter(name,
// releasing). As a lock's acquisition, with a claim and no turns: a refused
// Acquire claims the next free slot for its process, and an acquisition
// fulfils its process's claim. The stages keep the live holders, decide
// (_acquired), decide on the claim (_claims, an Acquire's), and write.
func slotPipeline(a slotAttempt) bson.A {
	var stages bson.A
	if a.mode == handOverMode { // the releasing holder leaves first
		stages = bson.A{set("holders", filterOf(ifNull("$holders", bson.A{}), op("$ne", "$$this.id", a.releasing)))}
	}
	stages = append(stages, liveStage, set("_acquired", op("$and", a.ofKind(), a.acquirable())))
	if a.mode == waitMode {
		stages = append(stages, set("_claims", a.claiming()))
	}
	return append(stages, obj("$set", a.write()))
}

// ofKind is whether the document is of the attempt's kind.
func (a slotAttempt) ofKind() bson.D { return op("$eq", "$kind", slotKind(a.rw)) }

// acquirable is whether the live holders and the claim leave the attempt
// its units: a semaphore's takes k only if at most n-k are live, with n
// agreed, and, while another process's claim is live, that claim's units
// stay free for it. An RWLock's: rwAcquirable.
func (a slotAttempt) acquirable() bson.D {
	if a.rw != 0 {
		return rwAcquirable(a.rw, a.proc)
	}
	size, room := op("$size", "$_live"), a.n-a.unitsTaken()+1 // fits if fewer than room are live
	return op("$and", op("$lt", size, room), a.agreed(),
		op("$or", not(otherClaim(a.proc)), op("$lt", op("$add", size, ifNull("$waitingUnits", 1)), room)))
}

// unitsTaken is how many of a semaphore's entries the attempt adds.
func (a slotAttempt) unitsTaken() int { return max(a.units, 1) }

// agreed is whether the caller's n is the semaphore's, or nobody holds it:
// a caller with another n is refused with an error, and claims nothing.
func (a slotAttempt) agreed() bson.D {
	return op("$or", op("$eq", op("$size", "$_live"), 0), op("$eq", "$n", a.n))
}

// claiming is _claims: whether a refused Acquire claims the next free slot
// for its process (placeTaken).
func (a slotAttempt) claiming() bson.D {
	terms := []any{not("$_acquired"), a.ofKind()}
	if a.rw == 0 {
		terms = append(terms, a.agreed())
	}
	return op("$and", append(terms, placeTaken("waiting", a.proc, claimToken(a.waitToken), a.claim))...)
}

// write is the last stage's: the acquisition if _acquired, else the
// refusal, which writes nothing but the claim, or a hand-over's release
// (releasedAt stamped, as a release does).
func (a slotAttempt) write() bson.D {
	write := append(a.holderWrites(), a.claimWrites()...)
	refusedWrite := any("$lastWrite")
	switch a.mode {
	case waitMode:
		write, refusedWrite = append(write, bson.E{Key: "_claims", Value: "$$REMOVE"}), cond("$_claims", wroteClaim, "$lastWrite")
	case handOverMode:
		write, refusedWrite = append(write, bson.E{Key: "releasedAt", Value: cond("$_acquired", ifNull("$releasedAt", "$$REMOVE"), releaseStamp)}), wroteRelease
	}
	return append(write, obj("lastWrite", cond("$_acquired", wroteAcquire, refusedWrite), "_live", "$$REMOVE", "_acquired", "$$REMOVE")...)
}

// holderWrites add the holder, with the next fencing token, to the live
// holders; the document's expiresAt only grows.
func (a slotAttempt) holderWrites() bson.D {
	until := later(a.expiry)
	holder := obj("id", a.id, "owner", literal(a.owner))
	if a.rw != 0 {
		holder = append(holder, bson.E{Key: "mode", Value: string(a.rw)})
	}
	holder = append(holder, obj("acquiredAt", "$$NOW", "expiresAt", until, "token", nextToken)...)
	added := any(bson.A{holder})
	if a.unitsTaken() > 1 { // one entry per unit, alike
		added = obj("$map", obj("input", op("$range", 0, a.unitsTaken()), "in", holder))
	}
	write := obj("holders", cond("$_acquired", op("$concatArrays", "$_live", added), "$holders"),
		"fencingToken", cond("$_acquired", nextToken, "$fencingToken"),
		"expiresAt", cond("$_acquired", op("$max", ifNull("$expiresAt", epoch), until), "$expiresAt"))
	if a.rw == 0 {
		write = append(write, bson.E{Key: "n", Value: cond("$_acquired", a.n, "$n")})
	}
	return write
}

// claimWrites are the claim's fields (an RWLock's with waitingMode): an
// acquisition fulfils its process's claim; a refusal that claims writes it.
func (a slotAttempt) claimWrites() bson.D {
	fields, claiming := claimFields[:], []any{a.proc, claimToken(a.waitToken), later(a.claim)}
	if a.rw != 0 {
		fields, claiming = append(fields, "waitingMode"), append(claiming, string(a.rw))
	} else {
		fields, claiming = append(fields, "waitingUnits"), append(claiming, a.unitsTaken())
	}
	var writes bson.D
	for i, f := range fields {
		v := any(cond("$_acquired", cond(op("$eq", "$waitingProcess", a.proc), "$$REMOVE", "$"+f), "$"+f)) // fulfilled
		if a.mode == waitMode {
			v = cond("$_claims", claiming[i], v)
		}
		writes = append(writes, bson.E{Key: f, Value: v})
	}
	return writes
}

// slotKind is the kind of the documents whose slots are taken in mode rw:
// an RWLock's if rw is not 0, else a semaphore's.
func slotKind(rw rwMode) string {
	if rw != 0 {
		return "rwlock"
	}
	return "semaphore"
}

// slotReplyFields return, of the document after a slot's acquisition, only
// what the client reads: the newest holder (this acquisition's, if it took
// a slot), not the whole list.
var slotReplyFields = obj("kind", 1, "n", 1, "fencingToken", 1, "waitingProcess", 1, "holders", obj("$slice", -1))

// semHolderFilter matches the semaphore only while id holds a slot of it:
// owner-checked, as ownerFilter.
func semHolderFilter(name, id string) bson.D { return obj("_id", name, "holders.id", id) }

// semReleaseUpdate: release a slot, updateOne(semHolderFilter,
// semReleaseUpdate). The token stays; the top-level expiresAt too, so the
// TTL index deletes the document at most ttlGraceSeconds after the
// released lease would have ended. releasedAt is what releaseEvents look for.
func semReleaseUpdate(id string) bson.D {
	return obj("$pull", obj("holders", obj("id", id)), "$currentDate", obj("releasedAt", true))
}

// semExtendUpdate: extend slots' leases, one or a batch across semaphores,
// updateMany(semExtendFilter, semExtendUpdate). Each listed holder still in
// its document is extended. The document's expiresAt only grows: processes
// with a shorter expiry must not pull it below another holder's lease, or
// the TTL monitor could delete a held document.
func semExtendFilter(names, ids bson.A) bson.D {
	return obj("_id", obj("$in", names), "holders.id", obj("$in", ids))
}

func semExtendUpdate(ids bson.A, expiry time.Duration) bson.A {
	until := later(expiry)
	extended := cond(op("$in", "$$this.id", ids), op("$mergeObjects", "$$this", obj("expiresAt", until)), "$$this")
	return bson.A{set("holders", obj("$map", obj("input", "$holders", "in", extended)),
		"expiresAt", op("$max", ifNull("$expiresAt", epoch), until), "lastWrite", wroteExtend)}
}

// semHoldersQuery: after a batch of slots that may have matched fewer
// holders than it had handles, or a release that matched none, read their
// holders to find the lost ones, and the slots last taken over by ticket
// (takenOverIds), to tell a hand-off from a loss.
func semHoldersQuery(names bson.A) (filter, projection bson.D) {
	return obj("_id", obj("$in", names)), obj("holders.id", 1, "takenOverIds", 1)
}

// semInspectPipeline: inspect a semaphore or an RWLock,
// aggregate([{$match: filter}, {$project: …}]) on the semaphores'
// collection. The holders are the live ones, as an acquisition judges
// them: by the server's clock.
func semInspectPipeline(match bson.D) mongo.Pipeline {
	claimLive := future("$waitingUntil")
	upgrading := filterOf(liveHolders, future("$$this.upgradingUntil"))
	return mongo.Pipeline{obj("$match", match), obj("$project", obj(
		"kind", 1, "n", 1, "holders", liveHolders, "fencingToken", 1, "waiting", claimLive,
		"writerWaiting", op("$or", op("$and", claimLive, op("$eq", "$waitingMode", "w")), op("$gt", op("$size", upgrading), 0)),
		"now", "$$NOW", "waitingProcess", 1, "waitingSince", 1, "waitingUntil", 1))}
}

// semListPipeline: list semaphores and RWLocks, as listPipeline lists locks.
func semListPipeline(prefix string) mongo.Pipeline {
	return sortedByName(semInspectPipeline(prefixFilter(prefix)))
}

// semForceReleaseUpdate: force release a semaphore or an RWLock,
// updateOne(semForceReleaseFilter, semForceReleaseUpdate), every holder at
// once; one holder, updateOne(semHolderFilter,
// semForceReleaseHolderUpdate). The fencing token stays, and the claim: a
// waiter takes a slot at its next attempt. As forceReleaseUpdate, only
// live holders are ended, so the reply's modified count says whether a
// holder was ended.
func semForceReleaseFilter(name string) bson.D {
	return obj("_id", name, "holders.0", obj("$exists", true))
}

var semForceReleaseUpdate = semForceReleaseOf(liveHolders, bson.A{})

// semForceReleaseHolderUpdate ends holder id, if its lease is live.
func semForceReleaseHolderUpdate(id string) bson.A {
	return semForceReleaseOf(filterOf(liveHolders, op("$eq", "$$this.id", id)),
		filterOf("$holders", op("$ne", "$$this.id", id)))
}

// semForceReleaseOf sets holders to after and stamps releasedAt, as a
// release does, if ending is not empty; else it changes nothing.
func semForceReleaseOf(ending, after any) bson.A {
	ends := op("$gt", op("$size", ending), 0)
	return bson.A{set("holders", cond(ends, after, "$holders"), "releasedAt", cond(ends, releaseStamp, "$releasedAt"),
		"lastWrite", cond(ends, wroteRelease, "$lastWrite"))}
}
