package mongolock

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// An RWLock's statements. An RWLock is one document in the semaphores'
// collection, acquired by slotPipeline with a mode, and released, handed
// over and extended as a semaphore's slot (protocol_semaphore.go):
//
//	{_id: name, kind: "rwlock",
//	 holders: [{id, owner, mode, acquiredAt, expiresAt, token,
//	            upgrade, upgradingUntil}],
//	 fencingToken, expiresAt, waitingProcess, waitingSince, waitingUntil,
//	 waitingMode, releasedAt, lastWrite}
//
// A holder without mode (a Semaphore's, under the same name) counts as a
// writer. The claim goes to the process that has waited longest, whatever
// its mode; what it blocks is rwAcquirable's.

// rwMode is what an RWLock's acquisition holds: a holder's mode.
type rwMode byte

const (
	readMode    rwMode = 'r'
	writeMode   rwMode = 'w'
	upgradeMode rwMode = 'u' // an upgradeable reader's: shares with readers, excludes writers and other upgradeable readers
)

// createRWDoc: create an RWLock, insertOne, as a lock's.
func createRWDoc(name string) bson.D {
	return obj("_id", name, "kind", "rwlock", "holders", bson.A{}, "expiresAt", epoch)
}

// rwAcquirable is whether the live holders and the claim leave an
// acquisition in mode rw of process proc a slot. A writer's live claim
// (waitingMode "w") blocks new readers, even of its own process, so that
// readers cannot starve writers; a reader's claim blocks other processes'
// writers, so that writers cannot starve readers; an upgradeable reader's
// claim blocks other processes' upgradeable readers too. While an
// upgradeable reader upgrades, a live upgradingUntil blocks new readers.
func rwAcquirable(rw rwMode, proc string) bson.D {
	claimLive := future("$waitingUntil")
	switch rw {
	case readMode:
		sharing := op("$or", op("$eq", "$$this.mode", "r"), op("$eq", "$$this.mode", "u"))
		writers := filterOf("$_live", op("$or", not(sharing), future("$$this.upgradingUntil")))
		return op("$and", op("$eq", op("$size", writers), 0), not(op("$and", claimLive, op("$eq", "$waitingMode", "w"))))
	case upgradeMode:
		others := filterOf("$_live", op("$ne", "$$this.mode", "r"))
		claimed := op("$or", op("$eq", "$waitingMode", "w"), op("$and", op("$eq", "$waitingMode", "u"), op("$ne", "$waitingProcess", proc)))
		return op("$and", op("$eq", op("$size", others), 0), not(op("$and", claimLive, claimed)))
	}
	return op("$and", op("$eq", op("$size", "$_live"), 0), not(otherClaim(proc))) // a writer's
}

// upgradePipeline: upgrade an upgradeable reader, polling,
// findOneAndUpdate(semHolderFilter(name, id), upgradePipeline,
// returnDocument: after, fields: upgradeReplyFields(id)). If id is the only
// live holder, it becomes the writer, with the next fencing token. Else it
// marks its holder with the poll's tag and upgradingUntil, a claim's
// lifetime from now: a live mark keeps new readers out, and lapses unless
// the next poll renews it. It changes only a live holder in mode "u": a
// late poll, after its Upgrade made id the writer, changes nothing.
func upgradePipeline(id, tag string, claim time.Duration) bson.A {
	others := filterOf("$_live", op("$ne", "$$this.id", id))
	mine := filterOf("$_live", op("$and", op("$eq", "$$this.id", id), op("$eq", "$$this.mode", "u")))
	decide := set("_alone", op("$eq", op("$size", others), 0), "_mine", op("$gt", op("$size", mine), 0))
	upgraded := op("$and", "$_mine", "$_alone")
	holder := cond(op("$and", "$_mine", op("$eq", "$$this.id", id)),
		cond("$_alone", rewrittenHolder(writeMode, nextToken, tag, "$$REMOVE"),
			rewrittenHolder(upgradeMode, "$$this.token", tag, later(claim))),
		"$$this")
	write := obj("holders", mapHolders(holder), "fencingToken", cond(upgraded, nextToken, "$fencingToken"),
		"lastWrite", cond("$_mine", cond("$_alone", wroteAcquire, wroteClaim), "$lastWrite"),
		"_live", "$$REMOVE", "_alone", "$$REMOVE", "_mine", "$$REMOVE")
	return bson.A{liveStage, decide, obj("$set", write)}
}

// upgradeReplyFields return, of the document after an upgrade's poll, only
// id's holder.
func upgradeReplyFields(id string) bson.D { return obj("holders", obj("$elemMatch", obj("id", id))) }

// rewrittenHolder is the holder $$this in mode, with token, and an
// upgrade's tag and upgradingUntil ($$REMOVE: none).
func rewrittenHolder(mode rwMode, token, tag, until any) bson.D {
	return obj("id", "$$this.id", "owner", "$$this.owner", "mode", string(mode), "acquiredAt", "$$this.acquiredAt",
		"expiresAt", "$$this.expiresAt", "token", token, "upgrade", tag, "upgradingUntil", until)
}

// mapHolders is the holders, each $$this replaced with in.
func mapHolders(in any) bson.D {
	return obj("$map", obj("input", ifNull("$holders", bson.A{}), "in", in))
}

// upgradeTagFilter: undo an upgrade's poll, when its Upgrade gives up,
// updateOne(upgradeTagFilter(name, id, tag), holderModeUpdate(id,
// upgradeMode)). Only that poll's mark, or the writer it made, is undone:
// a later poll's is tagged otherwise. releasedAt is stamped, as a
// release's: readers may enter again.
func upgradeTagFilter(name, id, tag string) bson.D {
	return obj("_id", name, "holders", obj("$elemMatch", obj("id", id, "upgrade", tag)))
}

// holderModeUpdate: downgrade a writer, updateOne(semHolderFilter(name,
// id), holderModeUpdate(id, mode)), mode "r", or "u" for an upgraded one.
// One statement: no moment without the lock, and readers may enter at once
// (releasedAt, as a release stamps it).
func holderModeUpdate(id string, mode rwMode) bson.A {
	in := cond(op("$eq", "$$this.id", id), rewrittenHolder(mode, "$$this.token", "$$REMOVE", "$$REMOVE"), "$$this")
	return bson.A{set("holders", mapHolders(in), "releasedAt", releaseStamp, "lastWrite", wroteRelease)}
}
