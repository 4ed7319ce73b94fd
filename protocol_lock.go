package mongolock

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A lock's statements, in the order a lock meets them. A lock is one
// document (docs/document-format.md says what each field means):
//
//	{_id: name, lockId, acquiredAt, expiresAt, fencingToken,
//	 owner, value,
//	 lastProcess, lastLockId, processStreak,
//	 waitingProcess, waitingSince, waitingUntil,
//	 nextProcess, nextSince, nextUntil, lastWrite}
//
// The first five are DistributedLock.MongoDB's, which judges "free" as
// mongolock does and ignores the rest, so Go and .NET services can share
// a lock. The fields from lastProcess on only decide whose turn it is
// between processes (the rule: the pacer, pacer.go).

// turnLength is how many acquisitions in a row make a process's turn: while
// another process claims the next turn, a release hands the lock on within
// its process only until the turn is over, and then steps aside.
const turnLength = 8

// createDoc: a missing document is inserted free (insertOne); a duplicate
// key means someone else just did. Acquisition never upserts: an upsert's
// $$NOW can be taken before a concurrent deletion, so a re-created document
// could get a token floor below tokens issued meanwhile.
func createDoc(name string) bson.D { return obj("_id", name, "expiresAt", epoch) }

// acquirePipeline: acquire, findOneAndUpdate({_id: name}, pipeline,
// returnDocument: after); or hand over, the same with ownerFilter(name,
// releasing), which releases a handle and acquires for the next waiter of
// its process in one round trip, or only releases if another process's
// turn has come.
//
// Every expression of a stage reads the document as the stage found it, so
// the first stages compute scratch fields (_attempt, _mine, _free, then the
// places) that the last reads and removes: each condition is written once,
// and the server reads a fraction of the size. Only _attempt changes per
// attempt (lockId; since: the token its line saw when it began to wait;
// value, if any); the rest is encoded once per provider and mode
// (acquireParts).
func acquirePipeline(lockID string, waitToken int64, value *string, parts acquireParts) bson.A {
	attempt := obj("lockId", lockID, "since", waitToken)
	if value != nil {
		attempt = append(attempt, bson.E{Key: "value", Value: literal(*value)})
	}
	return append(bson.A{set("_attempt", attempt, "_mine", parts.mine, "_free", parts.free)}, parts.stages...)
}

// acquireParts are the constant parts of an acquisition's pipeline, encoded:
// the first stage's expressions, and the stages after it (bson.Raw).
type acquireParts struct {
	mine, free bson.Raw
	stages     bson.A
}

// acquirer is who acquires, and how: the constants of one process's
// acquisitions of locks in one mode.
type acquirer struct {
	proc, owner         string
	mode                attemptMode
	expiry, claim, next time.Duration // the lease; how long a claim lasts; a place as next after it
	turn                int           // turnLength, or an election's
}

// newAcquireParts encodes the constant parts of a's acquisitions.
func newAcquireParts(a acquirer) acquireParts {
	if a.mode == unclaimedMode {
		return acquireParts{} // built per attempt: it has nothing worth encoding once
	}
	parts := acquireParts{mine: mustMarshal(a.mine()), free: mustMarshal(a.free())}
	for _, s := range a.stages() {
		parts.stages = append(parts.stages, mustMarshal(s))
	}
	return parts
}

// mine is _mine: whether the last acquisition was this process's.
func (a acquirer) mine() bson.D { return op("$eq", "$lastProcess", a.proc) }

// stages are the stages after the first: the places, and the write.
func (a acquirer) stages() []bson.D { return append(a.placeStages(), a.writeStage()) }

// free is _free: the lock is free, and no other process's live claim keeps
// this attempt out.
func (a acquirer) free() bson.D {
	available, turnOver := any(past("$expiresAt")), op("$gte", ifNull("$processStreak", 0), a.turn)
	var keptOut any = true // every Acquire
	switch a.mode {
	case tryMode: // only once this process's turn is over: a free lock goes to a cron job's one attempt
		keptOut = op("$and", a.mine(), turnOver)
	case handOverMode: // the filter found the releasing holder: it hands over within its process on its turn only
		available, keptOut = true, turnOver
	}
	return op("$and", available, not(op("$and", future("$waitingUntil"), op("$ne", "$waitingProcess", a.proc), keptOut)))
}

// placeStages decide, once for the fields that read them, whether this
// process's claim is met (_met), whether it is next (_nextMine), whether
// the next is live (_nextLive); and for an Acquire, whether a refusal
// claims (_claims) or takes the place as next (_nexts).
func (a acquirer) placeStages() []bson.D {
	places := obj("_met", op("$eq", "$waitingProcess", a.proc), "_nextMine", op("$eq", "$nextProcess", a.proc), "_nextLive", future("$nextUntil"))
	if a.mode != waitMode {
		return []bson.D{obj("$set", places)}
	}
	// A refusal claims unless this process acquired last (_mine) or a
	// DistributedLock.MongoDB holder holds (may), whose delete-release must
	// not race with a write. Where another process's claim stays, it takes
	// the place next, even after its turn: the claimant's process then steps
	// aside for it.
	token := claimToken("$_attempt.since")
	may := op("$and", not("$_free"),
		op("$or", op("$eq", op("$type", "$lockId"), "missing"), op("$eq", "$lockId", "$lastLockId")))
	places = append(places, bson.E{Key: "_claims", Value: op("$and", may, not("$_mine"), placeTaken("waiting", a.proc, token, a.claim))})
	return []bson.D{obj("$set", places),
		set("_nexts", op("$and", may, not("$_claims"), op("$ne", "$waitingProcess", a.proc), placeTaken("next", a.proc, token, a.next)))}
}

// writeStage writes each field as the acquisition does if _free, else as
// the refusal does (refused: what it writes of the acquisition's fields;
// the others stay), and removes the scratch fields.
func (a acquirer) writeStage() bson.D {
	var refused map[string]any
	scratch := obj("_attempt", "$$REMOVE", "_mine", "$$REMOVE", "_free", "$$REMOVE", "_met", "$$REMOVE", "_nextMine", "$$REMOVE", "_nextLive", "$$REMOVE")
	switch a.mode {
	case handOverMode: // the filter found the releasing holder: refused, it is released
		refused = map[string]any{"lockId": "$$REMOVE", "expiresAt": "$$NOW", "lastWrite": wroteRelease}
	case waitMode:
		refused = map[string]any{"lastWrite": cond(op("$or", "$_claims", "$_nexts"), wroteClaim, "$lastWrite")}
		scratch = append(scratch, obj("_claims", "$$REMOVE", "_nexts", "$$REMOVE")...)
	}
	value := cond(op("$eq", op("$type", "$_attempt.value"), "missing"), "$$REMOVE", "$_attempt.value")
	var fields bson.D
	for _, f := range acquiredFields(a.proc, a.owner, a.expiry, "$_attempt.lockId", value, "$_mine") {
		r, ok := refused[f.Key]
		if !ok {
			r = "$" + f.Key
		}
		fields = append(fields, bson.E{Key: f.Key, Value: cond("$_free", f.Value, r)})
	}
	return obj("$set", append(append(fields, a.placeFields()...), scratch...))
}

// placeFields are the claim's and the next's fields. Acquired: this
// process's claim, if any, is met, and the next claims in its place while
// it lasts; or this process was next. Refused: an Acquire claims, or takes
// the place as next; claiming, it is next no more.
func (a acquirer) placeFields() bson.D {
	token := claimToken("$_attempt.since")
	promoted, claiming, nexting := [3]any{"$nextProcess", "$nextSince", later(a.claim)}, [3]any{a.proc, token, later(a.claim)}, [3]any{a.proc, token, later(a.next)}
	var fields bson.D
	for i, f := range claimFields {
		acquired, refused := cond("$_met", cond("$_nextLive", promoted[i], "$$REMOVE"), "$"+f), any("$"+f)
		if a.mode == waitMode {
			refused = cond("$_claims", claiming[i], refused)
		}
		fields = append(fields, bson.E{Key: f, Value: cond("$_free", acquired, refused)})
	}
	for i, f := range nextFields {
		acquired, refused := cond(op("$or", "$_met", "$_nextMine"), "$$REMOVE", "$"+f), any("$"+f)
		if a.mode == waitMode {
			refused = cond("$_claims", cond("$_nextMine", "$$REMOVE", refused), cond("$_nexts", nexting[i], refused))
		}
		fields = append(fields, bson.E{Key: f, Value: cond("$_free", acquired, refused)})
	}
	return fields
}

// unclaimedPipeline: acquire a lock nobody waits for,
// findOneAndUpdate({_id: name}, pipeline, returnDocument: after), an
// Acquire's first attempt while its process has not been refused the lock
// for a while. It acquires only a free lock that no live claim or place as
// next reserves, where the turn rule has nothing to decide, and that has no
// value to remove (a campaign's sets its own): one expression, which the
// server reads in a fraction of acquirePipeline's time. Otherwise it
// leaves the document as it was, and the Acquire sends acquirePipeline.
func unclaimedPipeline(proc, owner string, expiry time.Duration, lockID string, value *string) bson.A {
	unclaimed := bson.A{past("$expiresAt"), past("$waitingUntil"), past("$nextUntil")}
	var v any = "$$REMOVE" // omitted from the object: the value stays missing
	if value != nil {
		v = literal(*value)
	} else {
		unclaimed = append(unclaimed, op("$eq", op("$type", "$value"), "missing"))
	}
	acquired := op("$mergeObjects", "$$ROOT", acquiredFields(proc, owner, expiry, lockID, v, op("$eq", "$lastProcess", proc)))
	return bson.A{obj("$replaceWith", cond(op("$and", unclaimed...), acquired, "$$ROOT"))}
}

// acquiredFields are the fields an acquisition of process proc for owner
// writes, and their values: lockID and value the attempt's, mine whether
// the last acquisition was this process's.
func acquiredFields(proc, owner string, expiry time.Duration, lockID, value, mine any) bson.D {
	return obj("lockId", lockID, "acquiredAt", "$$NOW", "expiresAt", later(expiry),
		"fencingToken", nextToken, "owner", literal(owner), "value", value, "lastProcess", proc, "lastLockId", lockID,
		"processStreak", cond(mine, op("$add", ifNull("$processStreak", 0), 1), 1), "lastWrite", wroteAcquire)
}

// releaseUpdate: release, updateOne(ownerFilter, releaseUpdate). The holder
// is cleared and the lease ends now, but the document stays, and with it
// the fencing token for the next holder to outrank. A plain update: the
// server does less than for a pipeline.
var releaseUpdate = mustMarshal(obj("$unset", obj("lockId", ""), "$currentDate", obj("expiresAt", true)))

// holdReleaseUpdate: release, holding the lock until atLeast after its
// acquisition (WithHoldAtLeast), updateOne(ownerFilter, holdReleaseUpdate).
// The lease ends no sooner than acquiredAt + atLeast, by the server's clock:
// every acquirer judges the lock free by expiresAt alone. Until then the
// holder stays, marked held (heldSuffix): inspection shows it, a force
// release ends it, and nothing of the released handle matches it again. A
// hold already over releases as releaseUpdate does. A pipeline: $max needs one.
func holdReleaseUpdate(atLeast time.Duration) bson.A {
	end := op("$add", "$acquiredAt", atLeast.Milliseconds())
	holds, held := op("$gt", end, "$$NOW"), op("$concat", bson.A{"$lockId", heldSuffix})
	return bson.A{set("lockId", cond(holds, held, "$$REMOVE"), "lastLockId", cond(holds, held, "$lastLockId"),
		"expiresAt", op("$max", "$$NOW", end), "lastWrite", wroteRelease)}
}

// heldSuffix marks the lockId (and lastLockId) of a released acquisition
// held until its hold ends.
const heldSuffix = ":held"

// ownerFilter matches the document only while lockID holds it: extension and
// release can never touch someone else's acquisition.
func ownerFilter(name, lockID string) bson.D { return obj("_id", name, "lockId", lockID) }

// extendUpdate: extend leases, one or a batch, updateMany(extendFilter,
// extendUpdate). Matching both lists is as owner-checked as an $or of
// {_id, lockId} pairs, since a lockId is only ever written to its own
// lock's document, and it is an index lookup on _id. With WithHoldAtMost
// (atMost > 0), no lease is extended past acquiredAt + atMost.
func extendUpdate(expiry, atMost time.Duration) bson.A {
	var until any = later(expiry)
	if atMost > 0 {
		until = op("$min", until, op("$add", "$acquiredAt", atMost.Milliseconds()))
	}
	return bson.A{set("expiresAt", until, "lastWrite", wroteExtend)}
}

func extendFilter(names, lockIDs bson.A) bson.D {
	return obj("_id", obj("$in", names), "lockId", obj("$in", lockIDs))
}

// holdersQuery: after a batch that matched fewer documents than it had
// handles, or a release that matched none, read their holders to find the
// lost ones, and the acquisition last taken over by ticket
// (takenOverLockId), to tell a hand-off from a loss.
func holdersQuery(names bson.A) (filter, projection bson.D) {
	return obj("_id", obj("$in", names)), obj("lockId", 1, "takenOverLockId", 1)
}

// withdrawUpdate: withdraw a claim, updateOne(withdrawFilter,
// withdrawUpdate), when an Acquire gives up and no other of its process
// waits for the lock: its process's claim, and its place as next.
func withdrawFilter(name, proc string) bson.D {
	return obj("_id", name, "$or", bson.A{obj("waitingProcess", proc), obj("nextProcess", proc)})
}

func withdrawUpdate(proc string) bson.A {
	fields := bson.D{}
	for _, group := range [][3]string{claimFields, nextFields} {
		for _, f := range group {
			fields = append(fields, bson.E{Key: f, Value: cond(op("$eq", "$"+group[0], proc), "$$REMOVE", "$"+f)})
		}
	}
	fields = append(fields, bson.E{Key: "lastWrite", Value: wroteClaim}) // the filter found one to withdraw
	return bson.A{obj("$set", fields)}
}

// inspectPipeline: inspect, aggregate([{$match: filter}, {$project: …}]),
// each lock's state, judged by the server's clock. owner and value count
// only when the holder is the last mongolock acquisition (lockId ==
// lastLockId); a DistributedLock.MongoDB acquisition leaves them as they
// were. A value makes it an election's: a plain lock's acquisition removes it.
func inspectPipeline(match bson.D) mongo.Pipeline {
	held := op("$and", op("$ne", op("$type", "$lockId"), "missing"), leaseLive)
	return mongo.Pipeline{obj("$match", match), obj("$project", obj(
		"kind", cond(op("$eq", op("$type", "$value"), "missing"), string(KindLock), string(KindElection)),
		"held", held, "lockId", 1, "mongolock", op("$eq", "$lockId", "$lastLockId"),
		"owner", 1, "value", 1, "acquiredAt", 1, "expiresAt", 1, "fencingToken", 1,
		"waiting", future("$waitingUntil"), "now", "$$NOW",
		"waitingProcess", 1, "waitingSince", 1, "waitingUntil", 1, "nextProcess", 1, "nextSince", 1, "nextUntil", 1))}
}

// listPipeline: list, inspectPipeline over prefixFilter(prefix), sorted by
// name and read in batches of listBatchSize. The semaphores' collection is
// listed alike (semListPipeline), and the two merged by name.
func listPipeline(prefix string) mongo.Pipeline {
	return sortedByName(inspectPipeline(prefixFilter(prefix)))
}

// forceReleaseUpdate: force release, updateOne(forceReleaseFilter,
// forceReleaseUpdate), the release of whatever acquisition holds the lock,
// mongolock's or DistributedLock.MongoDB's; of one holder, named by its
// lockId, updateOne(ownerFilter, forceReleaseUpdate). The fencing token
// stays. Only a live holder is ended, as inspectPipeline judges one, so the
// reply's modified count says whether a holder was ended. The condition is
// in the pipeline, not the filter: FerretDB refuses $$NOW in a filter's
// $expr on a collection with an index on expiresAt (the TTL index).
func forceReleaseFilter(name string) bson.D { return obj("_id", name, "lockId", obj("$exists", true)) }

var forceReleaseUpdate = bson.A{set("lockId", cond(leaseLive, "$$REMOVE", "$lockId"), "expiresAt", cond(leaseLive, "$$NOW", "$expiresAt"),
	"lastWrite", cond(leaseLive, wroteRelease, "$lastWrite"))}

// leaseLive is whether the holder's lease has not ended.
var leaseLive = future("$expiresAt")
