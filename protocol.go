package mongolock

import (
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The protocol: every statement mongolock sends, in the order a lock meets
// them. Nothing else goes over the wire.
//
// A lock is one document:
//
//	{_id: name, lockId, acquiredAt, expiresAt, fencingToken,
//	 owner, value,
//	 lastProcess, lastLockId, processStreak,
//	 waitingProcess, waitingSince, waitingUntil,
//	 nextProcess, nextSince, nextUntil, lastWrite}
//
// The first five are DistributedLock.MongoDB's: both libraries judge "free"
// the same way, so Go and .NET services can share a lock. It ignores the
// others:
//
//   - owner: who made the last mongolock acquisition (WithOwner; by default
//     the host name and process id); value: what that acquisition carries
//     (an election's leader value), absent for a plain lock.
//
// The rest only decide whose turn it is between processes:
//
//   - lastProcess, lastLockId: the process that made the last mongolock
//     acquisition, and that acquisition's lockId.
//   - processStreak: how many times in a row lastProcess acquired.
//   - waitingProcess, waitingSince, waitingUntil: a process waiting in
//     Acquire that claims the next turn; the fencing token it saw when it
//     began to wait (a smaller one: it has waited longer, and takes the
//     claim over); and the server time until which its claim counts unless
//     it asks again. While it counts, a freed lock is the claimant's: only
//     a release of the process on its turn hands it on within that process.
//   - nextProcess, nextSince, nextUntil: the same for the process next after
//     the claim, which claims when the claim is met.
//   - lastWrite: what the last pipeline update did, for change streams'
//     filters (see 9).
//
// Mutual exclusion rests on expiresAt alone, judged by the server's $$NOW.

// Kind is what a name of a Provider's collections is.
type Kind string

// The kinds. A semaphore or an RWLock lives apart from locks and
// elections: one of each may share a name.
const (
	KindLock      Kind = "lock"      // a Lock's, or DistributedLock.MongoDB's
	KindElection  Kind = "election"  // an Election's: a lock whose last mongolock acquisition carried a value
	KindSemaphore Kind = "semaphore" // a Semaphore's
	KindRWLock    Kind = "rwlock"    // an RWLock's
)

// rwMode is what an RWLock's acquisition holds.
type rwMode byte

const (
	readMode    rwMode = 'r'
	writeMode   rwMode = 'w'
	upgradeMode rwMode = 'u' // an upgradeable reader's
)

// reply is what the engine reads of an acquisition's reply, the document
// after the update, of any kind.
type reply struct {
	LockID         string    `bson:"lockId"` // the holder's; a slot's newest holder's
	FencingToken   int64     `bson:"fencingToken"`
	LastProcess    string    `bson:"lastProcess"`
	ProcessStreak  int       `bson:"processStreak"`
	WaitingProcess string    `bson:"waitingProcess"`
	WaitingUntil   time.Time `bson:"waitingUntil"`
	NextProcess    string    `bson:"nextProcess"` // a lock's: the process next after the claim
	AcquiredAt     time.Time `bson:"acquiredAt"`  // the holder's acquisition (a slot's newest), server time
	turn           int       // the kind's turnLength; 0: no turns to time (a slot's)
	wrong          error     // the document is of another kind or size: an error, not contention
}

// placed reports whether the reply shows process proc claiming the next
// turn or next after the claim.
func (r reply) placed(proc string) bool { return r.WaitingProcess == proc || r.NextProcess == proc }

// turnLength is how many acquisitions in a row make a process's turn: while
// another process claims the next turn, a release hands the lock on within
// its process only until the turn is over, and then steps aside. An
// election's turn is one term: a leader that resigns steps aside for a
// campaign waiting in another process.
const (
	turnLength   = 8
	electionTurn = 1
)

// tokenFloorScale makes the fencing token's floor toLong($$NOW) * 1024: a
// re-created document still outranks every earlier token, and up to 1024
// acquisitions per millisecond keep increasing by one.
const tokenFloorScale = 1024

var epoch = bson.NewDateTimeFromTime(time.Unix(0, 0))

// 1. Create. A missing document is inserted free; a duplicate key means
// someone else just did. Acquisition never upserts: an upsert's $$NOW can be
// taken before a concurrent deletion, so a re-created document could get a
// token floor below tokens issued meanwhile. (Upserts racing to create a
// name are not the reason: MongoDB retries the loser itself, an equality
// match on _id; FerretDB fails it with code 1.)
func createDoc(name string) bson.D {
	return obj("_id", name, "expiresAt", epoch)
}

// attemptMode says what a refused acquisition does.
type attemptMode int

const (
	tryMode       attemptMode = iota // TryAcquire: leaves the document as it is
	waitMode                         // Acquire: claims the next turn for its process
	handOverMode                     // Release to a waiter of its process: releases
	unclaimedMode                    // Acquire, first: only a lock nobody waits for; no match otherwise
	attemptModes
)

// attempt is what one acquisition round trip sends.
type attempt struct {
	id        string // the fresh lockId or holder id
	releasing string // a hand-over's releasing holder; "" otherwise
	waitToken int64  // the token its line saw when it began to wait, which claims are made with
	mode      attemptMode
}

// 2. Acquire: findOneAndUpdate({_id: name}, pipeline, returnDocument: after).
// 3. Hand over: the same with the filter {_id: name, lockId: releasing}, so
// that one round trip releases a handle and acquires for the next waiter of
// its process, or only releases if another process's turn has come.
//
// Every expression of a stage is evaluated on the document as the stage
// found it, so the first stages compute scratch fields that the last uses
// and removes:
//
//	{$set: {_attempt: {lockId: <fresh lockId>, since: <token>[, value]},
//	        _mine: <lastProcess is this one>,
//	        _free: <expired, and not this process's turn to step aside>}}
//	{$set: {_met: <this process's claim>, _nextMine: <this process is next>,
//	        _nextLive: <a next is live>[, _claims: <refused, and claims the next turn>]}}
//	{$set: {_nexts: <refused, another's claim stays, and it is next>}}  (Acquire only)
//	{$set: {<each field>: {$cond: ["$_free", <acquired>, <refused>]},
//	        <each scratch field>: "$$REMOVE"}}
//
// Only _attempt changes per attempt (since: the token its process saw when
// it began to wait; value: the value to hold the lock with, if any); the
// rest is the same for every attempt of a provider and mode, and is encoded
// once (acquireParts). Each condition is written once, in a scratch field:
// the server reads a statement a fraction of the size.
func acquirePipeline(lockID string, waitToken int64, value *string, parts acquireParts) bson.A {
	attempt := obj("lockId", lockID, "since", waitToken)
	if value != nil {
		attempt = append(attempt, bson.E{Key: "value", Value: literal(*value)})
	}
	return append(bson.A{set("_attempt", attempt, "_mine", parts.mine, "_free", parts.free)}, parts.stages...)
}

func acquireFilter(name string) bson.D { return obj("_id", name) }

var acquireOptions = options.FindOneAndUpdate().SetReturnDocument(options.After)

// acquireParts are the constant parts of an acquisition's pipeline, encoded:
// the first stage's expressions, and the stages after it (bson.Raw).
type acquireParts struct {
	mine, free bson.Raw
	stages     bson.A
}

// 2a. Acquire a lock nobody waits for: findOneAndUpdate({_id: name},
// unclaimedPipeline, returnDocument: after). An Acquire whose process has
// not been refused the lock for a while sends this first. It acquires
// only a free lock that no live claim or place as next reserves, where the
// turn rule has nothing to decide, and that has no value to remove (a
// campaign's sets its own), so the acquisition's fields are written as
// they are, in one expression: a statement the server reads in a fraction
// of the time of (2). Otherwise it leaves the document as it was, and the
// Acquire sends (2) at once.
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
	return obj("lockId", lockID, "acquiredAt", "$$NOW", "expiresAt", op("$add", "$$NOW", expiry.Milliseconds()),
		"fencingToken", nextToken, "owner", literal(owner), "value", value, "lastProcess", proc, "lastLockId", lockID,
		"processStreak", cond(mine, op("$add", ifNull("$processStreak", 0), 1), 1), "lastWrite", wroteAcquire)
}

// newAcquireParts encodes the constant parts of the acquisitions of process
// proc for owner. claim is how long a waiting claim lasts, next a place as
// next after it; turn, how many acquisitions in a row make a process's turn.
func newAcquireParts(proc, owner string, mode attemptMode, expiry, claim, next time.Duration, turn int) acquireParts {
	if mode == unclaimedMode {
		return acquireParts{} // built per attempt: it has nothing worth encoding once
	}
	mine, free, stages := acquireExprs(proc, owner, mode, expiry, claim, next, turn)
	parts := acquireParts{mine: mustMarshal(mine), free: mustMarshal(free)}
	for _, s := range stages {
		parts.stages = append(parts.stages, mustMarshal(s))
	}
	return parts
}

// acquireExprs returns _mine's and _free's expressions and the stages after
// the first.
func acquireExprs(proc, owner string, mode attemptMode, expiry, claim, next time.Duration, turn int) (mine, free bson.D, stages []bson.D) {
	const isFree, isMine, now = "$_free", "$_mine", "$$NOW"
	mine = op("$eq", "$lastProcess", proc)
	claimLive := future("$waitingUntil")
	available := any(past("$expiresAt"))
	refused := map[string]any{} // what a refusal writes of the acquisition's fields; the others stay
	if mode == handOverMode {
		// The filter found the releasing lockId holding the lock. Refused,
		// it is released.
		available = true
		refused = map[string]any{"lockId": "$$REMOVE", "expiresAt": now, "lastWrite": wroteRelease}
	}
	streak := ifNull("$processStreak", 0)
	// Another process's live claim keeps a free lock for the claimant: it
	// keeps out every Acquire. A release hands over within its process
	// only on that process's turn; a TryAcquire is kept out only once that
	// turn is over: a free lock goes to a cron job's one attempt.
	var keptOut any = true
	switch mode {
	case tryMode:
		keptOut = op("$and", mine, op("$gte", streak, turn))
	case handOverMode:
		keptOut = op("$gte", streak, turn) // the releasing holder was this process's
	}
	free = op("$and", available, not(op("$and", claimLive, op("$ne", "$waitingProcess", proc), keptOut)))
	waitingProcess, waitingSince, waitingUntil := any("$waitingProcess"), any("$waitingSince"), any("$waitingUntil")
	nextProcess, nextSince, nextUntil := any("$nextProcess"), any("$nextSince"), any("$nextUntil")
	scratch := obj("_attempt", "$$REMOVE", "_mine", "$$REMOVE", "_free", "$$REMOVE")
	// Whether this process's claim is met (_met), whether it is next
	// (_nextMine) and whether the next is live (_nextLive), written once for
	// the fields that read them.
	const claimMet, nextMine, nextLive = "$_met", "$_nextMine", "$_nextLive"
	places := obj("_met", op("$eq", "$waitingProcess", proc), "_nextMine", op("$eq", "$nextProcess", proc),
		"_nextLive", future("$nextUntil"))
	for _, f := range places {
		scratch = append(scratch, bson.E{Key: f.Key, Value: "$$REMOVE"})
	}
	if mode == waitMode {
		// Refused: claim the next turn (claimTaken), unless this process
		// has had its turn, or a DistributedLock.MongoDB acquisition holds
		// the lock (its delete-release must not race with a write). Where
		// another process's claim stays, be next after it, also after a
		// turn: the claimant's process then steps aside for it.
		const claims, nexts = "$_claims", "$_nexts"
		token := claimToken("$_attempt.since")
		may := op("$and", not(isFree),
			op("$or", op("$eq", op("$type", "$lockId"), "missing"), op("$eq", "$lockId", "$lastLockId")))
		places = append(places, bson.E{Key: "_claims", Value: op("$and", may, not(isMine), claimTaken(proc, token, claim))})
		stages = append(stages, obj("$set", places),
			set("_nexts", op("$and", may, not(claims), op("$ne", "$waitingProcess", proc), placeTaken("next", proc, token, next))))
		waitingProcess = cond(claims, proc, "$waitingProcess")
		waitingSince = cond(claims, token, "$waitingSince")
		waitingUntil = cond(claims, op("$add", now, claim.Milliseconds()), "$waitingUntil")
		// Claiming, it is next no more.
		keep := func(field string) bson.D { return cond(nextMine, "$$REMOVE", "$"+field) }
		nextProcess = cond(claims, keep("nextProcess"), cond(nexts, proc, "$nextProcess"))
		nextSince = cond(claims, keep("nextSince"), cond(nexts, token, "$nextSince"))
		nextUntil = cond(claims, keep("nextUntil"), cond(nexts, op("$add", now, next.Milliseconds()), "$nextUntil"))
		refused["lastWrite"] = cond(op("$or", claims, nexts), wroteClaim, "$lastWrite")
		scratch = append(scratch, bson.E{Key: "_claims", Value: "$$REMOVE"}, bson.E{Key: "_nexts", Value: "$$REMOVE"})
	}
	if mode != waitMode {
		stages = append(stages, obj("$set", places))
	}
	// Acquired: this process's claim, if any, is fulfilled, and the next
	// claims in its place while it lasts; or this process was next.
	promoted := func(claimField string, next any) bson.D {
		return cond(claimMet, cond(nextLive, next, "$$REMOVE"), "$"+claimField)
	}
	unlessMet := func(field string) bson.D {
		return cond(op("$or", claimMet, nextMine), "$$REMOVE", "$"+field)
	}
	// Each field: as the acquisition writes it if free, else as refused.
	var fields bson.D
	value := cond(op("$eq", op("$type", "$_attempt.value"), "missing"), "$$REMOVE", "$_attempt.value")
	for _, f := range acquiredFields(proc, owner, expiry, "$_attempt.lockId", value, isMine) {
		r, ok := refused[f.Key]
		if !ok {
			r = "$" + f.Key
		}
		fields = append(fields, bson.E{Key: f.Key, Value: cond(isFree, f.Value, r)})
	}
	fields = append(fields, obj(
		"waitingProcess", cond(isFree, promoted("waitingProcess", "$nextProcess"), waitingProcess),
		"waitingSince", cond(isFree, promoted("waitingSince", "$nextSince"), waitingSince),
		"waitingUntil", cond(isFree, promoted("waitingUntil", op("$add", now, claim.Milliseconds())), waitingUntil),
		"nextProcess", cond(isFree, unlessMet("nextProcess"), nextProcess),
		"nextSince", cond(isFree, unlessMet("nextSince"), nextSince),
		"nextUntil", cond(isFree, unlessMet("nextUntil"), nextUntil))...)
	return mine, free, append(stages, obj("$set", append(fields, scratch...)))
}

// claimToken is the token a claim is made with: the one its line saw when
// it began to wait (waitToken), or on a first attempt, which does not know
// it yet, the current one.
func claimToken(waitToken any) bson.D {
	return op("$min", waitToken, ifNull("$fencingToken", int64(0)))
}

// claimTaken is whether a refused Acquire of process proc, whose line began
// to wait at token, writes its claim (for claim): placeTaken of the claim.
func claimTaken(proc string, token bson.D, claim time.Duration) bson.D {
	return placeTaken("waiting", proc, token, claim)
}

// placeTaken is whether a refused Acquire of process proc, whose line began
// to wait at token, takes the place whose fields are <place>Process,
// <place>Since and <place>Until (the claim: "waiting"; next after it:
// "next") for lifetime: when nobody holds it; when it holds it, half spent,
// so that most refusals write nothing; or when its holder's line has waited
// less, so that the longest waiting process has it, whatever the others do.
func placeTaken(place, proc string, token bson.D, lifetime time.Duration) bson.D {
	const now = "$$NOW"
	process, waitedSince, until := "$"+place+"Process", "$"+place+"Since", "$"+place+"Until"
	mine := op("$eq", process, proc)
	return op("$or",
		not(future(until)),
		op("$and", mine, op("$lt", until, op("$add", now, (lifetime/2).Milliseconds()))),
		op("$and", not(mine), op("$lt", token, ifNull(waitedSince, int64(math.MaxInt64)))))
}

// 4. Release: updateOne({_id, lockId}, releaseUpdate). The holder is
// cleared and the lease ends now, but the document stays, and with it the
// fencing token for the next holder to outrank. A plain update: the server
// does less than for a pipeline.
var releaseUpdate = mustMarshal(obj("$unset", obj("lockId", ""), "$currentDate", obj("expiresAt", true)))

// 4a. Release, holding the lock until atLeast after its acquisition
// (WithHoldAtLeast): updateOne({_id, lockId}, holdReleaseUpdate). The lease
// ends no sooner than acquiredAt + atLeast, by the server's clock: every
// acquirer judges the lock free by expiresAt alone. Until then the holder
// stays, marked held (lockId and lastLockId + heldSuffix): inspection shows
// it, a force release ends it, and nothing of the released handle (a late
// extension, a repeated release) matches it again. A hold already over
// releases as (4) does. A pipeline: $max needs one.
func holdReleaseUpdate(atLeast time.Duration) bson.A {
	end := op("$add", "$acquiredAt", atLeast.Milliseconds())
	holds, held := op("$gt", end, "$$NOW"), op("$concat", bson.A{"$lockId", heldSuffix})
	return bson.A{set("lockId", cond(holds, held, "$$REMOVE"), "lastLockId", cond(holds, held, "$lastLockId"),
		"expiresAt", op("$max", "$$NOW", end), "lastWrite", wroteRelease)}
}

// heldSuffix marks the lockId of a released acquisition held until its
// hold ends.
const heldSuffix = ":held"

// ownerFilter matches the document only while lockID holds it: extension and
// release can never touch someone else's acquisition.
func ownerFilter(name, lockID string) bson.D {
	return obj("_id", name, "lockId", lockID)
}

// 5. Extend leases, one or a batch: updateMany(extendFilter, extendUpdate).
// Matching both lists is as owner-checked as an $or of {_id, lockId} pairs,
// since a lockId is only ever written to its own lock's document, and it is
// an index lookup on _id. With WithHoldAtMost (atMost > 0), no lease is
// extended past its acquisition's acquiredAt + atMost.
func extendUpdate(expiry, atMost time.Duration) bson.A {
	var until any = op("$add", "$$NOW", expiry.Milliseconds())
	if atMost > 0 {
		until = op("$min", until, op("$add", "$acquiredAt", atMost.Milliseconds()))
	}
	return bson.A{set("expiresAt", until, "lastWrite", wroteExtend)}
}

func extendFilter(names, lockIDs bson.A) bson.D {
	return obj("_id", obj("$in", names), "lockId", obj("$in", lockIDs))
}

// 6. After a batch that matched fewer documents than it had handles: read
// their holders to find the lost ones.
func holdersQuery(names bson.A) (filter, projection bson.D) {
	return obj("_id", obj("$in", names)), obj("lockId", 1)
}

// 7. Withdraw a claim: updateOne(withdrawFilter, withdrawUpdate), when an
// Acquire gives up and no other of its process waits for the lock: its
// process's claim, and its place as next (a lock's).
func withdrawFilter(name, proc string) bson.D {
	return obj("_id", name, "$or", bson.A{obj("waitingProcess", proc), obj("nextProcess", proc)})
}

func withdrawUpdate(proc string) bson.A {
	fields := bson.D{}
	for _, group := range [][]string{{"waitingProcess", "waitingSince", "waitingUntil"}, {"nextProcess", "nextSince", "nextUntil"}} {
		for _, f := range group {
			fields = append(fields, bson.E{Key: f, Value: cond(op("$eq", "$"+group[0], proc), "$$REMOVE", "$"+f)})
		}
	}
	fields = append(fields, bson.E{Key: "lastWrite", Value: wroteClaim}) // the filter found one to withdraw
	return bson.A{obj("$set", fields)}
}

// TTLIndexName is the name of the TTL index on expiresAt, which the library
// creates once per process and collection, in the background: the server
// deletes a document ttlGraceSeconds after its lease ended. DistributedLock.MongoDB creates the same index with
// expireAfterSeconds 0, and ignores the conflict when it finds ours.
const TTLIndexName = "expiresAt_ttl"

// ttlGraceSeconds is how long a released or expired document stays: one
// hour. A re-created document's token floor comes from the server's clock,
// so the grace is how far that clock may step back without tokens going back.
const ttlGraceSeconds = 3600

func ttlIndex() mongo.IndexModel {
	return mongo.IndexModel{Keys: obj("expiresAt", 1), Options: options.Index().SetName(TTLIndexName).SetExpireAfterSeconds(ttlGraceSeconds)}
}

// If createIndex finds the index with other options (IndexOptionsConflict),
// listIndexes reads its expireAfterSeconds, and collMod raises a smaller one
// to the grace. A larger one, or none (no TTL), is left alone.
const indexOptionsConflict = 85

func raiseTTL(coll string) bson.D {
	return obj("collMod", coll, "index", obj("name", TTLIndexName, "expireAfterSeconds", int32(ttlGraceSeconds)))
}

// lastWrite is what the last write of a pipeline did to a document: it is
// read only by the change streams' filters (9, 14). MongoDB reports an
// update with a pipeline as a replace event, carrying only the document
// after it, on 4.4 always and from 5.0 whenever its diff would be no
// smaller than the document: the mark says what that write was. A classic update
// (a release's $unset, a proclaim's $set, a slot's $pull) is always
// reported as an update event, with its changed fields, and writes none.
const (
	wroteAcquire = "acquire" // an acquisition, of a lock or a slot; a finished upgrade
	wroteRelease = "release" // a release, a refused hand-over, an undone upgrade, a downgrade, a force release
	wroteExtend  = "extend"  // an extension
	wroteClaim   = "claim"   // a claim or place as next written or withdrawn; an upgrade's mark
)

// 9. Where the server has change streams, while some Acquire waits for a
// lock or a slot held by another process: watch the collection for releases,
// in each shape MongoDB 4.4 to 8.0 reports one: an update event whose lockId
// was removed (a lock's release) or whose releasedAt was stamped (a slot's),
// a replace event of a document whose last write was a release and that no
// lockId holds, or a delete (DistributedLock.MongoDB's release, the TTL
// monitor). Acquisitions, extensions and claims do not match.
var releaseEvents = mongo.Pipeline{obj("$match", obj("$or", bson.A{
	obj("operationType", "delete"), obj("updateDescription.removedFields", "lockId"),
	obj("updateDescription.updatedFields.releasedAt", obj("$exists", true)),
	obj("operationType", "replace", "fullDocument.lastWrite", wroteRelease, "fullDocument.lockId", obj("$exists", false)),
}))}

// 10. Inspect: aggregate([{$match: filter}, {$project: …}]): each lock's
// state, judged by the server's clock ($$NOW). owner and value count only
// when the holder is the last mongolock acquisition (lockId == lastLockId);
// a DistributedLock.MongoDB acquisition leaves them as they were. A value
// makes it an election's: a plain lock's acquisition removes it.
func inspectPipeline(match bson.D) mongo.Pipeline {
	now := "$$NOW"
	held := op("$and", op("$ne", op("$type", "$lockId"), "missing"), future("$expiresAt"))
	return mongo.Pipeline{obj("$match", match), obj("$project", obj(
		"kind", cond(op("$eq", op("$type", "$value"), "missing"), string(KindLock), string(KindElection)),
		"held", held, "lockId", 1, "mongolock", op("$eq", "$lockId", "$lastLockId"),
		"owner", 1, "value", 1, "acquiredAt", 1, "expiresAt", 1, "fencingToken", 1,
		"waiting", future("$waitingUntil"), "now", now))}
}

// 11. List: the same, with {$match: prefixFilter(prefix)} and then
// {$sort: {_id: 1}}, read in batches of listBatchSize: a scan of the _id
// index in name order. The semaphores' collection is listed alike (22),
// and the two merged by name.
func listPipeline(prefix string) mongo.Pipeline {
	return sortedByName(inspectPipeline(prefixFilter(prefix)))
}

// sortedByName inserts {$sort: {_id: 1}} after an inspection's $match.
func sortedByName(inspect mongo.Pipeline) mongo.Pipeline {
	return slices.Insert(inspect, 1, obj("$sort", obj("_id", 1)))
}

// listBatchSize bounds how many locks one reply of a listing carries.
const listBatchSize = 1000

// prefixFilter matches the string _ids that begin with prefix: the range
// from prefix up to the least string above all of them, in byte order. A
// range, not a pattern: nothing to escape, and it uses the _id index.
func prefixFilter(prefix string) bson.D {
	r := obj("$gte", prefix)
	end := []byte(prefix)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	if len(end) > 0 { // else no string above them all: no upper bound
		end[len(end)-1]++
		r = append(r, bson.E{Key: "$lt", Value: string(end)})
	}
	return obj("_id", r)
}

// 12. Force release: updateOne(forceReleaseFilter, forceReleaseUpdate),
// the release of whatever acquisition holds the lock, mongolock's or
// DistributedLock.MongoDB's; one holder, named by its lockId:
// updateOne(ownerFilter, forceReleaseUpdate). The fencing token stays.
// Only a live holder is ended, as Inspect judges one (10): a crashed
// holder's lockId, or a hold's that has ended, stays in the document
// after its lease, and the update leaves such a document as it is, so
// that the reply's modified count says whether a holder was ended. The
// condition is in the pipeline, not the filter: FerretDB refuses $$NOW in
// a filter's $expr on a collection with an index on expiresAt (the TTL
// index).
func forceReleaseFilter(name string) bson.D {
	return obj("_id", name, "lockId", obj("$exists", true))
}

var forceReleaseUpdate = func() bson.A {
	live := future("$expiresAt")
	return bson.A{set("lockId", cond(live, "$$REMOVE", "$lockId"), "expiresAt", cond(live, "$$NOW", "$expiresAt"),
		"lastWrite", cond(live, wroteRelease, "$lastWrite"))}
}()

// op is an aggregation operator: {name: arg} for one argument, {name: [args]}
// for more.
func op(name string, args ...any) bson.D {
	if len(args) == 1 {
		return bson.D{{Key: name, Value: args[0]}}
	}
	return bson.D{{Key: name, Value: bson.A(args)}}
}

// obj is the document of keys and values in turn: obj("a", 1, "b", 2) is
// {a: 1, b: 2}.
func obj(kv ...any) bson.D {
	d := make(bson.D, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}

// set is the pipeline stage {$set: obj(kv...)}.
func set(kv ...any) bson.D { return obj("$set", obj(kv...)) }

// not is {$not: [x]}: the array form, which every server accepts.
func not(x any) bson.D { return bson.D{{Key: "$not", Value: bson.A{x}}} }

func cond(c, then, otherwise any) bson.D { return op("$cond", c, then, otherwise) }

// literal is s as a value, never a field path or variable ("$…", "$$…").
func literal(s string) bson.D { return bson.D{{Key: "$literal", Value: s}} }

func ifNull(field string, otherwise any) bson.D { return op("$ifNull", field, otherwise) }

// future is whether the time in field (missing: the epoch) is still to
// come by the server's clock; past, whether it has come.
func future(field string) bson.D { return op("$gt", ifNull(field, epoch), "$$NOW") }
func past(field string) bson.D   { return op("$lte", ifNull(field, epoch), "$$NOW") }

func mustMarshal(doc bson.D) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		panic(err) // built from constants and validated options
	}
	return raw
}

// 13. Proclaim: updateOne({_id, lockId}, proclaimUpdate), a leader's new
// value. Owner-checked: a stale leader's proclaim matches nothing.
func proclaimUpdate(value string) bson.D {
	return set("value", value)
}

// 14. Where the server has change streams, while an election is observed:
// watch its document for a new holder, a release, a proclaimed value, its
// creation or its deletion: as an update event, by the fields it changed;
// as a replace event, by the last write's mark. Extensions and claims on
// turns do not match.
func leaderEvents(name string) mongo.Pipeline {
	exists := obj("$exists", true)
	return mongo.Pipeline{obj("$match", obj("documentKey._id", name, "$or", bson.A{
		obj("operationType", obj("$in", bson.A{"insert", "delete"})),
		obj("operationType", "replace", "fullDocument.lastWrite", obj("$in", bson.A{wroteAcquire, wroteRelease})),
		obj("updateDescription.updatedFields.lockId", exists), obj("updateDescription.updatedFields.value", exists),
		obj("updateDescription.removedFields", obj("$in", bson.A{"lockId", "value"})),
	}))}
}

// Semaphores. A semaphore of n slots is one document in the collection
// "<collection>_semaphores", apart from the locks, so that neither
// DistributedLock.MongoDB nor a Lock of the same name can mistake it for a
// lock:
//
//	{_id: name, kind: "semaphore", n,
//	 holders: [{id, owner, acquiredAt, expiresAt, token}],
//	 fencingToken, expiresAt, waitingProcess, waitingSince, waitingUntil,
//	 releasedAt, lastWrite}
//
// At most n holders are live (expiresAt after the server's $$NOW) at any
// server instant: an acquisition drops the expired holders and adds itself
// only if fewer than n remain. n is the document's while anyone holds a
// slot; an acquisition with another n is refused (attempt returns
// errSemaphoreSize), and one that finds no live holder sets n to its own.
// The top-level expiresAt is never before a live holder's: the TTL index
// deletes an idle semaphore's document as it does a lock's.

// semDoc is a semaphore acquisition's reply: the document after the update.
type semDoc struct {
	Kind           string      `bson:"kind"`
	N              int         `bson:"n"`
	FencingToken   int64       `bson:"fencingToken"`
	Holders        []semHolder `bson:"holders"`
	WaitingProcess string      `bson:"waitingProcess"`
}

type semHolder struct {
	ID         string    `bson:"id"`
	Token      int64     `bson:"token"`
	AcquiredAt time.Time `bson:"acquiredAt"`
}

// nextToken is an acquisition's fencing token: one more than the last, and
// at least the floor of $$NOW (tokenFloorScale).
var nextToken = op("$max",
	op("$add", ifNull("$fencingToken", int64(0)), int64(1)),
	op("$multiply", op("$toLong", "$$NOW"), int64(tokenFloorScale)))

// liveHolders are the holders whose lease has not ended.
var liveHolders = filterOf(ifNull("$holders", bson.A{}), op("$gt", "$$this.expiresAt", "$$NOW"))

// filterOf is the elements $$this of the array input for which cond holds.
func filterOf(input, cond any) bson.D {
	return obj("$filter", obj("input", input, "cond", cond))
}

// liveStage sets _live to liveHolders.
var liveStage = set("_live", liveHolders)

// 15. Create a semaphore: insertOne, as a lock's.
func createSemDoc(name string, n int) bson.D {
	return obj("_id", name, "kind", "semaphore", "n", n, "holders", bson.A{}, "expiresAt", epoch)
}

// 16. Acquire a slot, or hand one over: findOneAndUpdate({_id: name},
// slotPipeline, returnDocument: after). As a lock's acquisition, with a scalar
// claim (waitingProcess, waitingSince, waitingUntil) and no turns: a
// refused Acquire claims the next free slot for its process, unless
// another process's claim is live and that process has waited as long
// (waitingSince: the token seen when its line began to wait, as a lock's);
// its own is renewed once half spent. While another process's claim is
// live, an acquisition leaves it a slot: a semaphore's takes a slot only if
// another stays free, an RWLock's writer waits. An acquisition fulfils its
// process's claim. A semaphore's claim needs the semaphore's n: a caller
// with another n is refused with an error, and must leave nothing behind.
// The stages keep the live holders, decide, decide on the claim (Acquire
// only: once, for the fields that read it), and write; a refusal writes
// nothing but the claim. A hand-over (filter semHolderFilter(name,
// releasing)) first removes the releasing holder, and a refused one only
// releases, stamping releasedAt as a release does.
func slotPipeline(a slotAttempt) bson.A {
	const now, live, acq = "$$NOW", "$_live", "$_acquired"
	until := op("$add", now, a.expiry.Milliseconds())
	holder := obj("id", a.id, "owner", literal(a.owner))
	if a.rw != 0 {
		holder = append(holder, bson.E{Key: "mode", Value: string(a.rw)})
	}
	holder = append(holder, obj("acquiredAt", now, "expiresAt", until, "token", nextToken)...)
	claimLive := future("$waitingUntil")
	other := op("$and", claimLive, op("$ne", "$waitingProcess", a.proc)) // another process's live claim
	size := op("$size", live)
	ofKind := op("$eq", "$kind", slotKind(a.rw))
	var acquired, agreed any // agreed: the caller's n is the semaphore's
	switch a.rw {
	case readMode: // no live writer nor a waiting upgrade, and no writer's claim, even of this process
		sharing := op("$or", op("$eq", "$$this.mode", "r"), op("$eq", "$$this.mode", "u"))
		writers := filterOf(live, op("$or", not(sharing), future("$$this.upgradingUntil")))
		acquired = op("$and", op("$eq", op("$size", writers), 0), not(op("$and", claimLive, op("$eq", "$waitingMode", "w"))))
	case upgradeMode: // only live readers, and no writer's claim, nor another process's upgradeable reader's
		others := filterOf(live, op("$ne", "$$this.mode", "r"))
		claimed := op("$or", op("$eq", "$waitingMode", "w"), op("$and", op("$eq", "$waitingMode", "u"), op("$ne", "$waitingProcess", a.proc)))
		acquired = op("$and", op("$eq", op("$size", others), 0), not(op("$and", claimLive, claimed)))
	case writeMode:
		acquired = op("$and", op("$eq", size, 0), not(other))
	default: // a semaphore's: fewer than n live, with n agreed, and one to spare for another's claim
		agreed = op("$or", op("$eq", size, 0), op("$eq", "$n", a.n))
		acquired = op("$and", op("$lt", size, a.n), agreed, op("$or", not(other), op("$lt", size, a.n-1)))
	}
	mine := op("$eq", "$waitingProcess", a.proc)
	keep := func(field string) any { return cond(acq, cond(mine, "$$REMOVE", "$"+field), "$"+field) }
	claims := obj("waitingProcess", keep("waitingProcess"), "waitingSince", keep("waitingSince"), "waitingUntil", keep("waitingUntil"))
	if a.rw != 0 {
		claims = append(claims, bson.E{Key: "waitingMode", Value: keep("waitingMode")})
	}
	var claimStage bson.A // written once, read by each claim field
	refusedWrite := any("$lastWrite")
	if a.mode == waitMode {
		token := claimToken(a.waitToken)
		claiming := op("$and", not(acq), ofKind, claimTaken(a.proc, token, a.claim))
		if a.rw == 0 {
			claiming = op("$and", not(acq), ofKind, agreed, claimTaken(a.proc, token, a.claim))
		}
		claimStage = bson.A{set("_claims", claiming)}
		values := []any{a.proc, token, op("$add", now, a.claim.Milliseconds()), string(a.rw)}
		for i := range claims {
			claims[i].Value = cond("$_claims", values[i], claims[i].Value)
		}
		claims = append(claims, bson.E{Key: "_claims", Value: "$$REMOVE"})
		refusedWrite = cond("$_claims", wroteClaim, "$lastWrite")
	}
	write := obj("holders", cond(acq, op("$concatArrays", live, bson.A{holder}), "$holders"),
		"fencingToken", cond(acq, nextToken, "$fencingToken"),
		"expiresAt", cond(acq, op("$max", ifNull("$expiresAt", epoch), until), "$expiresAt"))
	if a.rw == 0 {
		write = append(write, bson.E{Key: "n", Value: cond(acq, a.n, "$n")})
	}
	write = append(write, claims...)
	var stages bson.A
	if a.mode == handOverMode {
		stages = bson.A{set("holders", filterOf(ifNull("$holders", bson.A{}), op("$ne", "$$this.id", a.releasing)))}
		write = append(write, bson.E{Key: "releasedAt", Value: cond(acq, ifNull("$releasedAt", "$$REMOVE"), releaseStamp)})
		refusedWrite = wroteRelease
	}
	write = append(write, obj("lastWrite", cond(acq, wroteAcquire, refusedWrite), "_live", "$$REMOVE", "_acquired", "$$REMOVE")...)
	stages = append(stages, liveStage, set("_acquired", op("$and", ofKind, acquired)))
	return append(append(stages, claimStage...), obj("$set", write))
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

// slotAttempt is what slotPipeline needs of one attempt.
type slotAttempt struct {
	id, releasing string // releasing: the holder handed over from (handOverMode)
	waitToken     int64  // the token its line saw when it began to wait
	proc, owner   string
	n             int    // a semaphore's slots
	rw            rwMode // an RWLock's mode; 0 for a semaphore
	mode          attemptMode
	expiry, claim time.Duration
}

// semHolderFilter matches the semaphore only while id holds a slot of it:
// owner-checked, as ownerFilter.
func semHolderFilter(name, id string) bson.D {
	return obj("_id", name, "holders.id", id)
}

// 17. Release a slot: updateOne(semHolderFilter, semReleaseUpdate). The
// token stays; the top-level expiresAt too, so the TTL index deletes the
// document at most ttlGraceSeconds after the released lease would have
// ended. releasedAt is what release events look for.
func semReleaseUpdate(id string) bson.D {
	return obj("$pull", obj("holders", obj("id", id)), "$currentDate", obj("releasedAt", true))
}

// releaseStamp is the releasedAt of a slot's release written by a
// pipeline: the server's time, or a millisecond past the stamp before if
// that is not earlier. From MongoDB 5.0, a pipeline's update event lists
// only the fields whose value changed, and release events look for this
// one (9): a second release within the same millisecond must change it
// too. A release by an update document (17) lists it in any case: the
// server logs a $currentDate field, changed or not.
var releaseStamp = op("$max", "$$NOW", op("$add", "$releasedAt", 1))

// 18. Extend slots' leases, one or a batch across semaphores:
// updateMany(semExtendFilter, semExtendUpdate). Each listed holder still in
// its document is extended. The document's expiresAt only grows: processes
// with a shorter expiry must not pull it below another holder's lease, or
// the TTL monitor could delete a held document.
func semExtendFilter(names, ids bson.A) bson.D {
	return obj("_id", obj("$in", names), "holders.id", obj("$in", ids))
}

func semExtendUpdate(ids bson.A, expiry time.Duration) bson.A {
	until := op("$add", "$$NOW", expiry.Milliseconds())
	extended := cond(op("$in", "$$this.id", ids), op("$mergeObjects", "$$this", obj("expiresAt", until)), "$$this")
	return bson.A{set("holders", obj("$map", obj("input", "$holders", "in", extended)),
		"expiresAt", op("$max", ifNull("$expiresAt", epoch), until), "lastWrite", wroteExtend)}
}

// 19. After a batch of slots that may have matched fewer holders than it
// had handles: read their holders to find the lost ones.
func semHoldersQuery(names bson.A) (filter, projection bson.D) {
	return obj("_id", obj("$in", names)), obj("holders.id", 1)
}

// Reader-writer locks. An RWLock is one document in the semaphores'
// collection, released and extended as a semaphore's:
//
//	{_id: name, kind: "rwlock",
//	 holders: [{id, owner, mode, acquiredAt, expiresAt, token,
//	            upgrade, upgradingUntil}],
//	 fencingToken, expiresAt, waitingProcess, waitingSince, waitingUntil,
//	 waitingMode, releasedAt, lastWrite}
//
// mode is "r", "u" (an upgradeable reader) or "w"; a holder without mode (a
// Semaphore's, under the same name) counts as a writer. An upgradeable
// reader shares with readers and excludes writers and other upgradeable
// readers. While it upgrades (upgradePipeline), its upgrade tags the poll
// that marked it, and a live upgradingUntil blocks new readers. A writer's
// live claim (waitingMode "w") blocks new readers, even of its own
// process, so that readers cannot starve writers; a reader's or an
// upgradeable reader's claim blocks writers of other processes, so that
// writers cannot starve readers, and an upgradeable reader's claim blocks
// other processes' upgradeable readers too. The claim goes to the process
// that has waited longest, whatever its mode. Acquired by 16, with the
// mode; released, handed over and extended as a semaphore's slot.

// 20. Create an RWLock: insertOne, as a lock's.
func createRWDoc(name string) bson.D {
	return obj("_id", name, "kind", "rwlock", "holders", bson.A{}, "expiresAt", epoch)
}

// 21. Inspect a semaphore or an RWLock: aggregate([{$match: filter},
// {$project: …}]) on the semaphores' collection, filter {_id: name}. The
// holders are the live ones, as an acquisition judges them: by the
// server's clock.
func semInspectPipeline(match bson.D) mongo.Pipeline {
	claimLive := future("$waitingUntil")
	upgrading := filterOf(liveHolders, future("$$this.upgradingUntil"))
	return mongo.Pipeline{obj("$match", match), obj("$project", obj(
		"kind", 1, "n", 1, "holders", liveHolders, "fencingToken", 1, "waiting", claimLive,
		"writerWaiting", op("$or", op("$and", claimLive, op("$eq", "$waitingMode", "w")), op("$gt", op("$size", upgrading), 0)),
		"now", "$$NOW"))}
}

// 22. List semaphores and RWLocks: the same, with {$match:
// prefixFilter(prefix)} and {$sort: {_id: 1}}, as a listing of locks (11).
func semListPipeline(prefix string) mongo.Pipeline {
	return sortedByName(semInspectPipeline(prefixFilter(prefix)))
}

// 23. Force release a semaphore or an RWLock:
// updateOne(semForceReleaseFilter, semForceReleaseUpdate), the release of
// every holder at once; one holder: updateOne(semHolderFilter,
// semForceReleaseHolderUpdate). The fencing token stays, and the claim: a
// waiter takes a slot at its next attempt. As a lock's (12), only live
// holders are ended: a document whose holders' leases have all ended (a
// crashed holder's stays in the list) is left as it is, and the reply's
// modified count says whether a holder was ended.
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

// 24. Upgrade an upgradeable reader, polling: findOneAndUpdate(
// semHolderFilter(name, id), upgradePipeline, returnDocument: after,
// fields: upgradeReplyFields(id)). If id is the only live holder, it
// becomes the writer, with the next fencing token. Else it marks its
// holder with the poll's tag and upgradingUntil, a claim's lifetime from
// now: a live mark keeps new readers out, and lapses unless the next poll
// renews it. It changes only a live holder in mode "u": a poll that arrives
// late, after its Upgrade made id the writer, changes nothing.
func upgradePipeline(id, tag string, claim time.Duration) bson.A {
	const now = "$$NOW"
	others := filterOf("$_live", op("$ne", "$$this.id", id))
	mine := filterOf("$_live", op("$and", op("$eq", "$$this.id", id), op("$eq", "$$this.mode", "u")))
	decide := set("_alone", op("$eq", op("$size", others), 0), "_mine", op("$gt", op("$size", mine), 0))
	upgraded := op("$and", "$_mine", "$_alone")
	holder := cond(op("$and", "$_mine", op("$eq", "$$this.id", id)),
		cond("$_alone", rewrittenHolder(writeMode, nextToken, tag, "$$REMOVE"),
			rewrittenHolder(upgradeMode, "$$this.token", tag, op("$add", now, claim.Milliseconds()))),
		"$$this")
	return bson.A{liveStage, decide, set("holders", mapHolders(holder), "fencingToken", cond(upgraded, nextToken, "$fencingToken"),
		"lastWrite", cond("$_mine", cond("$_alone", wroteAcquire, wroteClaim), "$lastWrite"),
		"_live", "$$REMOVE", "_alone", "$$REMOVE", "_mine", "$$REMOVE")}
}

// upgradeReplyFields return, of the document after an upgrade's poll, only
// id's holder.
func upgradeReplyFields(id string) bson.D {
	return obj("holders", obj("$elemMatch", obj("id", id)))
}

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

// 25. Undo an upgrade's poll, when its Upgrade gives up:
// updateOne(upgradeTagFilter(name, id, tag), holderModeUpdate(id,
// upgradeMode)). Only that poll's mark, or the writer it made, is undone:
// a later poll's is tagged otherwise. releasedAt is stamped, as a
// release's: readers may enter again.
func upgradeTagFilter(name, id, tag string) bson.D {
	return obj("_id", name, "holders", obj("$elemMatch", obj("id", id, "upgrade", tag)))
}

// 26. Downgrade a writer: updateOne(semHolderFilter(name, id),
// holderModeUpdate(id, mode)), mode "r", or "u" for an upgraded one. One
// statement: no moment without the lock, and readers may enter at once
// (releasedAt, as a release stamps it).
func holderModeUpdate(id string, mode rwMode) bson.A {
	in := cond(op("$eq", "$$this.id", id), rewrittenHolder(mode, "$$this.token", "$$REMOVE", "$$REMOVE"), "$$this")
	return bson.A{set("holders", mapHolders(in), "releasedAt", releaseStamp, "lastWrite", wroteRelease)}
}
