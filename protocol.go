package mongolock

import (
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The protocol: every statement mongolock sends, and nothing else goes over
// the wire. Each kind's statements are in its own file (protocol_lock.go,
// protocol_election.go, protocol_semaphore.go, protocol_rwlock.go); here
// are the pieces they share. Mutual exclusion rests on each document's
// expiresAt alone, judged by the server's $$NOW.

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

// acquireFilter selects name's document, for an acquisition or inspection.
func acquireFilter(name string) bson.D { return obj("_id", name) }

var acquireOptions = options.FindOneAndUpdate().SetReturnDocument(options.After)

// tokenFloorScale makes the fencing token's floor toLong($$NOW) * 1024: a
// re-created document still outranks every earlier token, and up to 1024
// acquisitions per millisecond keep increasing by one.
const tokenFloorScale = 1024

var epoch = bson.NewDateTimeFromTime(time.Unix(0, 0))

// nextToken is an acquisition's fencing token: one more than the last, and
// at least the floor of $$NOW (tokenFloorScale).
var nextToken = op("$max",
	op("$add", ifNull("$fencingToken", int64(0)), int64(1)),
	op("$multiply", op("$toLong", "$$NOW"), int64(tokenFloorScale)))

// A claim is a waiting process's reservation of the next turn (a lock's)
// or the next free slot: its fields are waitingProcess, waitingSince and
// waitingUntil; a lock's place as next after the claim has nextProcess,
// nextSince and nextUntil.
var (
	claimFields = [3]string{"waitingProcess", "waitingSince", "waitingUntil"}
	nextFields  = [3]string{"nextProcess", "nextSince", "nextUntil"}
)

// claimToken is the token a claim is made with: the one its line saw when
// it began to wait (waitToken), or on a first attempt, which does not know
// it yet, the current one.
func claimToken(waitToken any) bson.D {
	return op("$min", waitToken, ifNull("$fencingToken", int64(0)))
}

// placeTaken is whether a refused Acquire of process proc, whose line began
// to wait at token, takes the place whose fields are <place>Process,
// <place>Since and <place>Until (the claim: "waiting"; next after it:
// "next") for lifetime: when nobody holds it; when it holds it, half spent,
// so that most refusals write nothing; or when its holder's line has waited
// less, so that the longest waiting process has it, whatever the others do.
func placeTaken(place, proc string, token bson.D, lifetime time.Duration) bson.D {
	process, waitedSince, until := "$"+place+"Process", "$"+place+"Since", "$"+place+"Until"
	mine := op("$eq", process, proc)
	return op("$or",
		not(future(until)),
		op("$and", mine, op("$lt", until, later(lifetime/2))),
		op("$and", not(mine), op("$lt", token, ifNull(waitedSince, int64(math.MaxInt64)))))
}

// The slots of a semaphore's or an RWLock's document.

// liveHolders are the holders whose lease has not ended.
var liveHolders = filterOf(ifNull("$holders", bson.A{}), op("$gt", "$$this.expiresAt", "$$NOW"))

// liveStage sets _live to liveHolders.
var liveStage = set("_live", liveHolders)

// otherClaim is whether another process than proc has a live claim.
func otherClaim(proc string) bson.D {
	return op("$and", future("$waitingUntil"), op("$ne", "$waitingProcess", proc))
}

// releaseStamp is the releasedAt of a slot's release written by a
// pipeline: the server's time, or a millisecond past the stamp before if
// that is not earlier. From MongoDB 5.0, a pipeline's update event lists
// only the fields whose value changed, and releaseEvents look for this
// one: a second release within the same millisecond must change it too.
// semReleaseUpdate's $currentDate is listed in any case.
var releaseStamp = op("$max", "$$NOW", op("$add", "$releasedAt", 1))

// lastWrite is what the last write of a pipeline did to a document, for the
// change streams' filters (releaseEvents, leaderEvents): MongoDB may report
// a pipeline's update as a replace event, with only the document after it.
// A classic update (a release's $unset, a proclaim's $set, a slot's $pull)
// is reported as an update event, with its changed fields, and writes none.
const (
	wroteAcquire = "acquire" // an acquisition, of a lock or a slot; a finished upgrade
	wroteRelease = "release" // a release, a refused hand-over, an undone upgrade, a downgrade, a force release
	wroteExtend  = "extend"  // an extension
	wroteClaim   = "claim"   // a claim or place as next written or withdrawn; an upgrade's mark
)

// releaseEvents: where the server has change streams, while some Acquire
// waits for a lock or a slot held by another process, watch the collection
// for releases, in each shape MongoDB 4.4 to 8.0 reports one: an update
// event whose lockId was removed (a lock's release) or whose releasedAt was
// stamped (a slot's), a replace event of a document whose last write was a
// release and that no lockId holds, or a delete (DistributedLock.MongoDB's
// release, the TTL monitor). Acquisitions, extensions and claims do not match.
var releaseEvents = mongo.Pipeline{obj("$match", obj("$or", bson.A{
	obj("operationType", "delete"), obj("updateDescription.removedFields", "lockId"),
	obj("updateDescription.updatedFields.releasedAt", obj("$exists", true)),
	obj("operationType", "replace", "fullDocument.lastWrite", wroteRelease, "fullDocument.lockId", obj("$exists", false)),
}))}

// sortedByName inserts {$sort: {_id: 1}} after an inspection's $match: a
// listing scans the _id index in name order.
func sortedByName(inspect mongo.Pipeline) mongo.Pipeline {
	return slices.Insert(inspect, 1, obj("$sort", obj("_id", 1)))
}

// listBatchSize bounds how many documents one reply of a listing carries.
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

// later is the server's time d from now.
func later(d time.Duration) bson.D { return op("$add", "$$NOW", d.Milliseconds()) }

// filterOf is the elements $$this of the array input for which cond holds.
func filterOf(input, cond any) bson.D { return obj("$filter", obj("input", input, "cond", cond)) }

func mustMarshal(doc bson.D) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		panic(err) // built from constants and validated options
	}
	return raw
}
