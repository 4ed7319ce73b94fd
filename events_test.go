package mongolock

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/testdb"
)

// The change events MongoDB 4.4 to 8.0 report for each write the library
// sends, in the shapes its documentation gives
// (https://www.mongodb.com/docs/manual/reference/change-events/):
//
//   - insert: {operationType: "insert", documentKey: {_id}, fullDocument}
//   - delete: {operationType: "delete", documentKey: {_id}}
//   - update: {operationType: "update", documentKey: {_id}, updateDescription:
//     {updatedFields, removedFields}}; from 5.0 also truncatedArrays
//     [{field, newSize}], and an array's changed elements and a
//     subdocument's changed fields as dotted paths ("holders.1.expiresAt")
//     rather than the whole value.
//   - replace: {operationType: "replace", documentKey: {_id}, fullDocument}:
//     the document after the write, and nothing of what changed. An update
//     with a pipeline is reported so on 4.4 always, and from 5.0 when its
//     diff would be no smaller than the document.
//
// A classic update ($set, $unset, $pull, $currentDate) is reported as an
// update, in the 4.4 or the 5.0 form; a pipeline update as a 5.0 update or
// a replace. The test server has no change streams: each statement runs on
// it, the document is read before and after, the events are built from the
// two as MongoDB would, stored in a collection, and the watches' $match
// stages run over them as an aggregation.

// eventCase is one write and what the watches must make of it.
type eventCase struct {
	what     string
	coll     string // "locks" or "slots"
	release  bool   // releaseEvents must pass it
	leader   bool   // leaderEvents must pass it (the locks' collection only)
	pipeline bool   // an update with a pipeline: a 5.0 update or a replace
}

// An eventLog runs writes on the test server and stores the change events
// MongoDB would report of each, for the watches' filters to run over.
// Its claims and places as next last the whole test: no step depends on
// timing.
type eventLog struct {
	t                    *testing.T
	ctx                  context.Context
	locks, slots, events *mongo.Collection
	cases                []eventCase
	seq                  int
	owner                string
	expiry, claim, next  time.Duration
}

// anyToken is a first attempt's wait token.
const anyToken = math.MaxInt64

func newEventLog(t *testing.T) *eventLog {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := testdb.Database(t)
	return &eventLog{t: t, ctx: ctx, locks: db.Collection("locks"), slots: db.Collection("locks_semaphores"), events: db.Collection("events"),
		owner: "host/1", expiry: 30 * time.Second, claim: time.Hour, next: time.Hour}
}

// step runs write on c's collection's document name and stores the
// events MongoDB would report of it.
func (l *eventLog) step(c eventCase, name string, write func(coll *mongo.Collection) error) {
	t := l.t
	t.Helper()
	coll := l.locks
	if c.coll == "slots" {
		coll = l.slots
	}
	before := readDoc(l.ctx, t, coll, name)
	require.NoError(t, write(coll), c.what)
	after := readDoc(l.ctx, t, coll, name)
	require.NotEqual(t, before, after, "%s: the write changed nothing", c.what)
	l.cases = append(l.cases, c)
	for _, s := range eventShapes(name, before, after, c.pipeline) {
		l.seq++
		// The case's index and the shape's seq make the event's _id; the
		// filters read none of it.
		s = append(bson.D{{Key: "_id", Value: fmt.Sprintf("%03d/%d", l.seq, len(l.cases)-1)}}, s...)
		_, err := l.events.InsertOne(l.ctx, s)
		require.NoError(t, err, "%s: storing %v", c.what, s)
	}
}

// eventShapes are the events MongoDB may report of a write that changed
// document name from before to after (nil: none), by a pipeline or not.
func eventShapes(name string, before, after bson.D, pipeline bool) []bson.D {
	key := bson.D{{Key: "_id", Value: name}}
	switch {
	case before == nil:
		return []bson.D{{{Key: "operationType", Value: "insert"}, {Key: "documentKey", Value: key}, {Key: "fullDocument", Value: after}}}
	case after == nil:
		return []bson.D{{{Key: "operationType", Value: "delete"}, {Key: "documentKey", Value: key}}}
	}
	update := func(desc bson.D) bson.D {
		return bson.D{{Key: "operationType", Value: "update"}, {Key: "documentKey", Value: key}, {Key: "updateDescription", Value: desc}}
	}
	var shapes []bson.D
	if !pipeline {
		shapes = append(shapes, update(updateDescription44(before, after)))
	}
	shapes = append(shapes, update(updateDescription50(before, after)))
	if pipeline {
		shapes = append(shapes, bson.D{{Key: "operationType", Value: "replace"}, {Key: "documentKey", Value: key}, {Key: "fullDocument", Value: after}})
	}
	return shapes
}

// acquire attempts for process proc with lockId id; a hand-over releases
// the lockId releasing.
func (l *eventLog) acquire(name, proc, id, releasing string, mode attemptMode, waitToken int64, value *string, turn int) func(*mongo.Collection) error {
	filter := acquireFilter(name)
	if mode == handOverMode {
		filter = ownerFilter(name, releasing)
	}
	return func(coll *mongo.Collection) error {
		return coll.FindOneAndUpdate(l.ctx, filter, acquirePipeline(id, waitToken, value, newAcquireParts(acquirer{proc, l.owner, mode, l.expiry, l.claim, l.next, turn})), acquireOptions).Err()
	}
}

// extend extends the lock name's holder id.
func (l *eventLog) extend(name, id string) func(*mongo.Collection) error {
	return func(coll *mongo.Collection) error {
		_, err := coll.UpdateMany(l.ctx, extendFilter(bson.A{name}, bson.A{id}), extendUpdate(l.expiry, 0))
		return err
	}
}

// update applies u to the one document filter matches.
func (l *eventLog) update(filter bson.D, u any) func(*mongo.Collection) error {
	return func(coll *mongo.Collection) error {
		r, err := coll.UpdateOne(l.ctx, filter, u)
		if err == nil && r.ModifiedCount != 1 {
			err = fmt.Errorf("modified %d documents", r.ModifiedCount)
		}
		return err
	}
}

func (l *eventLog) insert(doc bson.D) func(*mongo.Collection) error {
	return func(coll *mongo.Collection) error { _, err := coll.InsertOne(l.ctx, doc); return err }
}

// take attempts a semaphore's or an RWLock's slot for process proc with
// id; a hand-over releases the holder releasing.
func (l *eventLog) take(name, proc, id, releasing string, n int, rw rwMode, mode attemptMode) func(*mongo.Collection) error {
	filter := acquireFilter(name)
	if mode == handOverMode {
		filter = semHolderFilter(name, releasing)
	}
	a := slotAttempt{id: id, releasing: releasing, waitToken: anyToken, proc: proc, owner: l.owner, n: n, rw: rw, mode: mode, expiry: l.expiry, claim: l.claim}
	return func(coll *mongo.Collection) error {
		opts := options.FindOneAndUpdate().SetReturnDocument(options.After).SetProjection(slotReplyFields)
		return coll.FindOneAndUpdate(l.ctx, filter, slotPipeline(a), opts).Err()
	}
}

// requireWatchesPassTheirsAlone runs each watch's pipeline over the stored
// events: the release events' must pass every case's events that are a
// release and no other, and the leader events' of the election leader
// ("": none) those of the locks' collection that its leader's watchers
// must see.
func (l *eventLog) requireWatchesPassTheirsAlone(leader string) {
	t := l.t
	passed := func(pipeline mongo.Pipeline) map[string]bool {
		cur, err := l.events.Aggregate(l.ctx, pipeline)
		require.NoError(t, err)
		var got []struct {
			ID string `bson:"_id"`
		}
		require.NoError(t, cur.All(l.ctx, &got))
		ids := map[string]bool{}
		for _, g := range got {
			ids[g.ID] = true
		}
		return ids
	}
	releases, leaders := passed(releaseEvents), map[string]bool{}
	if leader != "" {
		leaders = passed(leaderEvents(leader))
	}
	cur, err := l.events.Find(l.ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	require.NoError(t, err)
	var all []bson.Raw
	require.NoError(t, cur.All(l.ctx, &all))
	var wrong []string
	for _, e := range all {
		id := e.Lookup("_id").StringValue()
		i, err := strconv.Atoi(id[slices.Index([]byte(id), '/')+1:])
		require.NoError(t, err)
		c := l.cases[i]
		shape := e.Lookup("operationType").StringValue()
		if shape == "update" {
			shape += " (4.4)"
			if _, ok := e.Lookup("updateDescription").Document().Lookup("truncatedArrays").ArrayOK(); ok {
				shape = "update (5.0+)"
			}
		}
		if releases[id] != c.release {
			wrong = append(wrong, fmt.Sprintf("release events: %s, as %s: passed %v, want %v", c.what, shape, releases[id], c.release))
		}
		if c.coll == "locks" && leaders[id] != c.leader {
			wrong = append(wrong, fmt.Sprintf("leader events: %s, as %s: passed %v, want %v", c.what, shape, leaders[id], c.leader))
		}
	}
	require.Empty(t, wrong)
}

// A lock's life, and an election's, on the document "L".
func TestReleaseEventFiltersPassEveryReleaseOfALockAndAnElectionAndNothingElse(t *testing.T) {
	l := newEventLog(t)
	lock := func(what string, release, leader, pipeline bool) eventCase {
		return eventCase{what: "lock: " + what, coll: "locks", release: release, leader: leader, pipeline: pipeline}
	}
	const L = "L"
	l.step(lock("create", false, true, false), L, l.insert(createDoc(L)))
	l.step(lock("A acquires", false, true, true), L, l.acquire(L, "A", "a1", "", waitMode, anyToken, nil, turnLength))
	l.step(lock("A extends", false, false, true), L, l.extend(L, "a1"))
	l.step(lock("B, refused, claims", false, false, true), L, l.acquire(L, "B", "b", "", waitMode, anyToken, nil, turnLength))
	l.step(lock("C, refused, takes the place as next", false, false, true), L, l.acquire(L, "C", "c", "", waitMode, anyToken, nil, turnLength))
	l.step(lock("A releases", true, true, false), L, l.update(ownerFilter(L, "a1"), releaseUpdate))
	l.step(lock("D, refused on the free lock B claims, takes B's claim over", false, false, true), L, l.acquire(L, "D", "d", "", waitMode, 1, nil, turnLength))
	l.step(lock("D acquires", false, true, true), L, l.acquire(L, "D", "d1", "", waitMode, 1, nil, turnLength))
	l.step(lock("D hands over within its process", false, true, true), L, l.acquire(L, "D", "d2", "d1", handOverMode, 1, nil, turnLength))
	l.step(lock("D extends", false, false, true), L, l.extend(L, "d2"))
	l.step(lock("D's hand-over, refused (its turn is over, C claims), releases", true, true, true), L, l.acquire(L, "D", "d3", "d2", handOverMode, 1, nil, electionTurn))
	l.step(lock("C acquires", false, true, true), L, l.acquire(L, "C", "c1", "", waitMode, anyToken, nil, turnLength))
	l.step(lock("C releases, holding", false, true, true), L, l.update(ownerFilter(L, "c1"), holdReleaseUpdate(time.Hour)))
	l.step(lock("force release", true, true, true), L, l.update(forceReleaseFilter(L), forceReleaseUpdate))
	l.step(lock("C acquires one nobody waits for", false, true, true), L, func(coll *mongo.Collection) error {
		return coll.FindOneAndUpdate(l.ctx, acquireFilter(L), unclaimedPipeline("C", l.owner, l.expiry, "c2", nil), acquireOptions).Err()
	})
	l.step(lock("C releases, its hold over", true, true, true), L, l.update(ownerFilter(L, "c2"), holdReleaseUpdate(0)))
	leaderValue := "http://10.0.0.7:8080"
	l.step(lock("A campaigns and leads", false, true, true), L, l.acquire(L, "A", "a2", "", waitMode, anyToken, &leaderValue, electionTurn))
	l.step(lock("A proclaims", false, true, false), L, l.update(ownerFilter(L, "a2"), proclaimUpdate("http://10.0.0.7:9090")))
	l.step(lock("A extends its leadership", false, false, true), L, l.extend(L, "a2"))
	l.step(lock("B, refused, claims", false, false, true), L, l.acquire(L, "B", "b", "", waitMode, anyToken, nil, electionTurn))
	l.step(lock("B withdraws its claim", false, false, true), L, l.update(withdrawFilter(L, "B"), withdrawUpdate("B")))
	l.step(lock("deleted (DistributedLock.MongoDB's release, the TTL monitor)", true, true, false), L, func(coll *mongo.Collection) error {
		_, err := coll.DeleteOne(l.ctx, bson.D{{Key: "_id", Value: L}})
		return err
	})
	l.requireWatchesPassTheirsAlone(L)
}

// slotCase is a case of the semaphores' and RWLocks' collection.
func slotCase(what string, release, pipeline bool) eventCase {
	return eventCase{what: what, coll: "slots", release: release, pipeline: pipeline}
}

// A semaphore of 2 slots, "S".
func TestReleaseEventFiltersPassEveryReleaseOfASemaphoreAndNothingElse(t *testing.T) {
	l := newEventLog(t)
	const S = "S"
	l.step(slotCase("semaphore: create", false, false), S, l.insert(createSemDoc(S, 2)))
	l.step(slotCase("semaphore: A takes a slot", false, true), S, l.take(S, "A", "a1", "", 2, 0, waitMode))
	l.step(slotCase("semaphore: B takes a slot", false, true), S, l.take(S, "B", "b1", "", 2, 0, waitMode))
	l.step(slotCase("semaphore: C, refused, claims", false, true), S, l.take(S, "C", "c", "", 2, 0, waitMode))
	l.step(slotCase("semaphore: A and B extend", false, true), S, func(coll *mongo.Collection) error {
		_, err := coll.UpdateMany(l.ctx, semExtendFilter(bson.A{S}, bson.A{"a1", "b1"}), semExtendUpdate(bson.A{"a1", "b1"}, l.expiry))
		return err
	})
	l.step(slotCase("semaphore: A releases", true, false), S, l.update(semHolderFilter(S, "a1"), semReleaseUpdate("a1")))
	l.step(slotCase("semaphore: C takes its claimed slot", false, true), S, l.take(S, "C", "c1", "", 2, 0, waitMode))
	l.step(slotCase("semaphore: B hands over within its process", false, true), S, l.take(S, "B", "b2", "b1", 2, 0, handOverMode))
	l.step(slotCase("semaphore: D, refused, claims", false, true), S, l.take(S, "D", "d", "", 2, 0, waitMode))
	l.step(slotCase("semaphore: B's hand-over, refused (D claims), releases", true, true), S, l.take(S, "B", "b3", "b2", 2, 0, handOverMode))
	l.step(slotCase("semaphore: force release", true, true), S, l.update(semForceReleaseFilter(S), semForceReleaseUpdate))
	l.requireWatchesPassTheirsAlone("")
}

// An RWLock, "R".
func TestReleaseEventFiltersPassEveryReleaseOfAnRWLockAndNothingElse(t *testing.T) {
	l := newEventLog(t)
	const R = "R"
	upgrade := func(tag string) func(*mongo.Collection) error {
		return func(coll *mongo.Collection) error {
			return coll.FindOneAndUpdate(l.ctx, semHolderFilter(R, "b1"), upgradePipeline("b1", tag, l.claim),
				options.FindOneAndUpdate().SetReturnDocument(options.After).SetProjection(upgradeReplyFields("b1"))).Err()
		}
	}
	l.step(slotCase("rwlock: create", false, false), R, l.insert(createRWDoc(R)))
	l.step(slotCase("rwlock: A reads", false, true), R, l.take(R, "A", "a1", "", 1, readMode, waitMode))
	l.step(slotCase("rwlock: B reads, upgradeable", false, true), R, l.take(R, "B", "b1", "", 1, upgradeMode, waitMode))
	l.step(slotCase("rwlock: B polls to upgrade, A reading", false, true), R, upgrade("t1"))
	l.step(slotCase("rwlock: B gives its upgrade up", true, true), R, l.update(upgradeTagFilter(R, "b1", "t1"), holderModeUpdate("b1", upgradeMode)))
	l.step(slotCase("rwlock: A releases", true, false), R, l.update(semHolderFilter(R, "a1"), semReleaseUpdate("a1")))
	l.step(slotCase("rwlock: B upgrades, alone", false, true), R, upgrade("t2"))
	l.step(slotCase("rwlock: B downgrades", true, true), R, l.update(semHolderFilter(R, "b1"), holderModeUpdate("b1", readMode)))
	l.step(slotCase("rwlock: C, refused, claims to write", false, true), R, l.take(R, "C", "c", "", 1, writeMode, waitMode))
	l.step(slotCase("rwlock: B's read hand-over, refused (C claims to write), releases", true, true), R, l.take(R, "B", "b2", "b1", 1, readMode, handOverMode))
	l.step(slotCase("rwlock: C writes", false, true), R, l.take(R, "C", "c1", "", 1, writeMode, waitMode))
	l.step(slotCase("rwlock: C hands over within its process", false, true), R, l.take(R, "C", "c2", "c1", 1, writeMode, handOverMode))
	l.step(slotCase("rwlock: force release of the writer", true, true), R, l.update(semHolderFilter(R, "c2"), semForceReleaseHolderUpdate("c2")))
	l.requireWatchesPassTheirsAlone("")
}

// readDoc returns coll's document name, nil if there is none.
func readDoc(ctx context.Context, t *testing.T, coll *mongo.Collection, name string) bson.D {
	t.Helper()
	var d bson.D
	err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&d)
	if err == mongo.ErrNoDocuments {
		return nil
	}
	require.NoError(t, err)
	return d
}

// updateDescription44 is a 4.4 update event's description: each top-level
// field changed or added, whole, and each removed.
func updateDescription44(before, after bson.D) bson.D {
	updated, removed := bson.D{}, bson.A{}
	for _, f := range after {
		if old, ok := field(before, f.Key); !ok || !sameValue(old, f.Value) {
			updated = append(updated, f)
		}
	}
	for _, f := range before {
		if _, ok := field(after, f.Key); !ok {
			removed = append(removed, f.Key)
		}
	}
	return bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}}
}

// updateDescription50 is a 5.0+ update event's description: a
// subdocument's and an array's changes as dotted paths, and an array that
// shrank in truncatedArrays.
func updateDescription50(before, after bson.D) bson.D {
	updated, removed, truncated := bson.D{}, bson.A{}, bson.A{}
	var diff func(prefix string, before, after bson.D)
	var diffValue func(path string, old, v any)
	diffValue = func(path string, old, v any) {
		if sameValue(old, v) {
			return
		}
		switch nv := v.(type) {
		case bson.D:
			if od, ok := old.(bson.D); ok {
				diff(path+".", od, nv)
				return
			}
		case bson.A:
			if oa, ok := old.(bson.A); ok {
				for i, e := range nv {
					if i < len(oa) {
						diffValue(path+"."+strconv.Itoa(i), oa[i], e)
					} else {
						updated = append(updated, bson.E{Key: path + "." + strconv.Itoa(i), Value: e})
					}
				}
				if len(nv) < len(oa) {
					truncated = append(truncated, bson.D{{Key: "field", Value: path}, {Key: "newSize", Value: int32(len(nv))}})
				}
				return
			}
		}
		updated = append(updated, bson.E{Key: path, Value: v})
	}
	diff = func(prefix string, before, after bson.D) {
		for _, f := range after {
			if old, ok := field(before, f.Key); ok {
				diffValue(prefix+f.Key, old, f.Value)
			} else {
				updated = append(updated, bson.E{Key: prefix + f.Key, Value: f.Value})
			}
		}
		for _, f := range before {
			if _, ok := field(after, f.Key); !ok {
				removed = append(removed, prefix+f.Key)
			}
		}
	}
	diff("", before, after)
	return bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: truncated}}
}

func field(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

func sameValue(a, b any) bool {
	_, ra, err1 := bson.MarshalValue(a)
	_, rb, err2 := bson.MarshalValue(b)
	return err1 == nil && err2 == nil && slices.Equal(ra, rb)
}

// A change stream that opened and then ended (history lost, an event over
// 16 MB, an invalidate) is opened again notifyRetry after it ended, for
// the waiter still waiting or by the next waiter, after a wait that
// doubles while streams end as soon as they open; only a refusal to open
// one (a standalone server) is remembered for good.
func TestReleaseStreamThatEndsAfterOpeningIsReopenedAndARefusalIsRemembered(t *testing.T) {
	historyLost := mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost", Message: "Resume of change stream was not possible"}
	refused := mongo.CommandError{Code: 40573, Name: "Location40573", Message: "The $changeStream stage is only supported on replica sets"}
	require.False(t, isTransient(historyLost))
	require.False(t, isTransient(refused))

	synctest.Test(t, func(t *testing.T) {
		var bg sync.WaitGroup
		wake := func(string) {}
		var mu sync.Mutex // guards what follows, written by the runs
		runs := 0
		var endedAt time.Time // when the last run that ended did
		n := &notifier{source: func(ctx context.Context, _ store, ready func(), _ func(string)) error {
			mu.Lock()
			runs++
			run := runs
			mu.Unlock()
			ready()
			if run <= 2 {
				mu.Lock()
				endedAt = time.Now()
				mu.Unlock()
				return historyLost // open, and at once ended
			}
			<-ctx.Done()
			return nil
		}}
		// started checks that the runs so far are want, once what the
		// waiters set off has happened.
		started := func(want int, what string) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, want, runs, what)
		}
		ended := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return endedAt
		}
		retryAt := func() time.Time {
			n.mu.Lock()
			defer n.mu.Unlock()
			require.False(t, n.none, "a stream that opened and ended is remembered as refused")
			require.Nil(t, n.run, "the ended run is still counted as running")
			return n.retryAt
		}

		n.join(nil, wake, &bg) // a waiter that stays
		started(1, "the first waiter opened no stream")
		require.Equal(t, ended().Add(notifyRetry), retryAt(), "not reopened notifyRetry after it ended")
		time.Sleep(notifyRetry - time.Millisecond)
		started(1, "reopened sooner than notifyRetry after it ended")
		time.Sleep(time.Millisecond)
		started(2, "not reopened notifyRetry after it ended, for its waiter")
		require.Equal(t, ended().Add(2*notifyRetry), retryAt(), "a stream that ended as it opened, again: the wait did not double")

		n.leave() // no waiter during the wait: the next one reopens it
		time.Sleep(2*notifyRetry - time.Millisecond)
		n.join(nil, wake, &bg)
		started(2, "reopened by a waiter sooner than the doubled wait")
		n.leave()
		time.Sleep(time.Millisecond)
		n.join(nil, wake, &bg)
		started(3, "not reopened by the next waiter after the doubled wait")
		require.True(t, n.isOpen())
		n.leave() // the last waiter: the run stops after notifyLinger
		bg.Wait()

		calls := 0
		r := &notifier{source: func(context.Context, store, func(), func(string)) error {
			calls++
			return refused
		}}
		r.join(nil, wake, &bg)
		r.leave()
		bg.Wait()
		time.Sleep(notifyRetryMax)
		r.join(nil, wake, &bg)
		r.leave()
		bg.Wait()
		require.Equal(t, 1, calls, "a refusal to open a stream was not remembered")
		r.mu.Lock()
		require.True(t, r.none)
		r.mu.Unlock()
	})
}

// A release stream that could not open for a transient error (a server
// stepping down) is not remembered as refused: the next waiter opens it
// again, no sooner than notifyRetry after the failure, as an election
// observer does (streamRetry).
func TestReleaseStreamThatFailedToOpenTransientlyIsRetriedAfterNotifyRetry(t *testing.T) {
	steppingDown := mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Message: "the server is shutting down"}
	require.True(t, isTransient(steppingDown))
	var bg sync.WaitGroup
	defer bg.Wait()
	calls := 0
	n := &notifier{source: func(context.Context, store, func(), func(string)) error {
		calls++
		return steppingDown
	}}
	before := time.Now()
	n.join(nil, func(string) {}, &bg)
	n.leave()
	bg.Wait()
	n.join(nil, func(string) {}, &bg) // within notifyRetry: not reopened
	n.leave()
	bg.Wait()
	require.Equal(t, 1, calls, "reopened at once after a transient failure to open")
	n.mu.Lock()
	defer n.mu.Unlock()
	require.False(t, n.none, "a transient failure to open was remembered as a refusal")
	require.False(t, n.retryAt.Before(before.Add(notifyRetry)), "the next open is allowed sooner than notifyRetry after the failure")
}

// burst writes n documents to another collection of store in one
// operation, which no read of a change stream comes between, and waits
// for every goroutine to take it in.
func burst(t *testing.T, store *memdb.Store, n int) {
	t.Helper()
	require.NoError(t, store.Do(t.Context(), "mongolock_burst", func(c *memdb.Table, now time.Time) error {
		for i := range n {
			if err := c.InsertOne(now, bson.D{{Key: "_id", Value: fmt.Sprintf("%d.%d", now.UnixNano(), i)}}); err != nil {
				return err
			}
		}
		return nil
	}))
	synctest.Wait()
}

// closeAll closes providers, whatever state a failed check left them in.
func closeAll(providers ...*Provider) {
	for _, p := range providers {
		_ = p.Close(context.Background())
	}
}

// A waiter's release stream that falls behind the server's capped history
// (ChangeStreamHistoryLost, after writes to any collection of the
// deployment) is reopened while the waiter waits, notifyRetry after it
// ended, as a stream that ended otherwise is; a release that the lost
// stream never delivered is found by the waiter's polls within its sleep
// as a notified claimant. Nothing stays open after the providers close.
func TestReleaseStreamThatLostItsHistoryIsReopenedAndTheWaiterStillGetsTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const db, name, history = "mongolock_history", "ledger", 8
		store := memdb.NewStore(db, nil, memdb.WithHistory(history))
		holder, err := newMemProvider(store.Client(), db, nil)
		require.NoError(t, err)
		waiter, err := newMemProvider(store.Client(), db, nil)
		require.NoError(t, err)
		defer closeAll(holder, waiter) // if a check fails
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		h, err := holder.Lock(name).Acquire(ctx)
		require.NoError(t, err)
		type result struct {
			h   *Handle
			err error
		}
		acquired := make(chan result, 1)
		go func() {
			w, err := waiter.Lock(name).Acquire(ctx)
			acquired <- result{w, err}
		}()
		synctest.Wait()
		events := &waiter.Lock(name).collection().notify
		require.True(t, events.isOpen(), "no release stream while a waiter waits")

		burst(t, store, history+1)
		require.False(t, events.isOpen(), "a stream behind the history still runs")
		time.Sleep(notifyRetry)
		synctest.Wait()
		require.True(t, events.isOpen(), "the stream was not reopened %v after it lost its history, while its waiter waits", notifyRetry)

		burst(t, store, history+1)
		require.False(t, events.isOpen(), "a stream behind the history still runs")
		released := time.Now()
		require.NoError(t, h.Release(ctx))
		w := <-acquired
		require.NoError(t, w.err)
		require.LessOrEqual(t, time.Since(released), waiter.opts.notifiedClaimantSleep(),
			"the waiter missed the free lock for longer than its sleep as a notified claimant")
		require.NoError(t, w.h.Release(ctx))
		require.NoError(t, holder.Close(ctx))
		require.NoError(t, waiter.Close(ctx))
		synctest.Wait()
		require.Zero(t, store.Cursors(), "change streams open after every provider closed")
	})
}

// The state kept per client and collection is forgotten with the client
// also after its waiters joined the release events (and, where the server
// has change streams, had them): nothing of it keeps the client once
// nobody waits. Over a server: in process memory each provider's state is
// its own, kept by nothing but the provider.
func TestStateOfAClientWhoseWaitersHadReleaseEventsIsForgottenWithIt(t *testing.T) {
	server, db := testdb.Info(t), testdb.Database(t).Name()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	joined := func(n *notifier) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.waiters > 0 && (n.run != nil && n.run.open || !server.ChangeStreams)
	}
	baseline := Locals()
	for range 3 {
		func() {
			var clients []*mongo.Client
			defer func() {
				for _, c := range clients {
					_ = c.Disconnect(context.Background())
				}
			}()
			process := func() *Provider {
				c, err := mongo.Connect(options.Client().ApplyURI(server.URI))
				require.NoError(t, err)
				clients = append(clients, c)
				p, err := NewProvider(c.Database(db))
				require.NoError(t, err)
				return p
			}
			holder, waiter := process(), process()
			defer closeAll(holder, waiter)
			h, err := holder.Lock("ledger").Acquire(ctx)
			require.NoError(t, err)
			acquired := make(chan error, 1)
			go func() {
				w, err := waiter.Lock("ledger").Acquire(ctx)
				if err == nil {
					err = w.Release(ctx)
				}
				acquired <- err
			}()
			for !joined(&waiter.Lock("ledger").collection().notify) {
				require.NoError(t, ctx.Err(), "no release events while a waiter waits")
				time.Sleep(time.Millisecond)
			}
			require.NoError(t, h.Release(ctx))
			require.NoError(t, <-acquired)
		}()
	}
	for Locals() > baseline {
		require.NoError(t, ctx.Err(), "the state of gone clients is kept")
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// An election observer's stream that falls behind the history is
// reopened as the notifier's is: a change made while it was down is seen
// when it reopens, not after the observer's polling period (an hour).
func TestObserverReopensItsStreamAfterItLostItsHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const db, name, history = "mongolock_history", "leader", 8
		store := memdb.NewStore(db, nil, memdb.WithHistory(history))
		observer, err := newMemProvider(store.Client(), db, []Option{WithBusyWaitSleep(time.Hour, time.Hour)})
		require.NoError(t, err)
		leader, err := newMemProvider(store.Client(), db, nil)
		require.NoError(t, err)
		defer closeAll(observer, leader) // if a check fails
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := leader.Election(name).Campaign(ctx, "a")
		require.NoError(t, err)
		observing, stop := context.WithCancel(ctx)
		defer stop()
		observed := observer.Election(name).Observe(observing)
		require.Equal(t, "a", (<-observed).Value)
		synctest.Wait()
		opens := store.Cursors()

		burst(t, store, history+1)
		require.Less(t, store.Cursors(), opens, "the observer's stream still runs behind the history")
		require.NoError(t, l.Proclaim(ctx, "b"))
		changed := time.Now()
		require.Equal(t, "b", (<-observed).Value)
		require.LessOrEqual(t, time.Since(changed), notifyRetry, "a change while the stream was down was seen later than its reopening")
		synctest.Wait()
		require.Equal(t, opens, store.Cursors(), "the observer's stream was not reopened")

		stop()
		require.NoError(t, l.Release(ctx))
		require.NoError(t, observer.Close(ctx))
		require.NoError(t, leader.Close(ctx))
		synctest.Wait()
		require.Zero(t, store.Cursors(), "change streams open after every provider closed")
	})
}

// An election observer reopens its change stream as the notifier does
// (streamRetry): one that could not open for a transient error (a server
// stepping down) is opened again notifyRetry later, not after the longest
// busy-wait sleep, which is the observer's polling period and here an
// hour. Its first read is refused too: only the stream's reopening, and
// the read it triggers, can show the leader.
func TestObserverReopensItsStreamAfterATransientRefusalAsTheNotifierDoes(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		synctest.Test(t, func(t *testing.T) { testObserverReopensItsStream(t, form) })
	})
}

func testObserverReopensItsStream(t *testing.T, form memdb.Events) {
	store := memdb.NewStore("mongolock_observe", nil)
	store.SetEvents(form)
	obs := store.Client() // the observer's own network, whose faults the test sets
	observer, err := newMemProvider(obs, "mongolock_observe", []Option{WithBusyWaitSleep(time.Hour, time.Hour)})
	require.NoError(t, err)
	other, err := newMemProvider(store.Client(), "mongolock_observe", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() {
		require.NoError(t, observer.Close(context.Background()))
		require.NoError(t, other.Close(context.Background()))
	}()
	l, err := other.Election("observed").Campaign(ctx, "a")
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Release(ctx)) }()
	// The observer's collection is set up: what Observe sends next is the
	// stream's open and the first read, both refused.
	_, err = observer.Election("observed").Leader(ctx)
	require.NoError(t, err)
	obs.Faults.Refuse(2)
	refused := time.Now()
	observed := observer.Election("observed").Observe(ctx)
	got := <-observed
	require.Equal(t, l.FencingToken(), got.FencingToken)
	require.Equal(t, notifyRetry, time.Since(refused), "the state was not observed as the stream reopened, notifyRetry after its open was refused")
}

// An Upgrade waiting for another process's reader, where release events
// arrive (the in-memory store reports changes as MongoDB's change streams
// do), is paced as a notified claimant: it polls about every
// watchingClaimantSleep, not at the claimant's sleep, and the reader's
// release wakes it at once.
func TestUpgradeWhileReleaseEventsArriveIsPacedAsAWatchingClaimant(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		synctest.Test(t, func(t *testing.T) { testUpgradePace(t, form) })
	})
}

func testUpgradePace(t *testing.T, form memdb.Events) {
	const db, name = "mongolock_upgrade_pace", "ledger"
	store := memdb.NewStore(db, nil)
	store.SetEvents(form)
	readers, err := newMemProvider(store.Client(), db, nil)
	require.NoError(t, err)
	upgrader, err := newMemProvider(store.Client(), db, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := readers.RWLock(name).Reader().TryAcquire(ctx)
	require.NoError(t, err)
	u, err := upgrader.RWLock(name).Upgradeable().TryAcquire(ctx)
	require.NoError(t, err)
	upgraded := make(chan error, 1)
	go func() { upgraded <- u.Upgrade(ctx) }()

	// Its first poll marks the readers off and opens the stream.
	time.Sleep(2 * time.Second)
	synctest.Wait()
	require.True(t, upgrader.RWLock(name).Reader().collection().notify.isOpen(), "release events arrive")
	const window = 20 * time.Second
	before := store.Ops()
	time.Sleep(window)
	synctest.Wait()
	o := upgrader.opts
	// The polls, and the two providers' lease extensions in the window.
	ops, most := store.Ops()-before, int64(window/o.notifiedClaimantSleep())+2*int64(window/(o.expiry/3))+2
	if ops > most {
		t.Errorf("%d operations in %v while the upgrade waits, want at most %d (its claimant's sleep would be %v, a notified claimant's is %v)",
			ops, window, most, o.claimantSleep(), o.notifiedClaimantSleep())
	}
	select {
	case err := <-upgraded:
		t.Fatalf("the upgrade returned %v while a reader of another process holds", err)
	default:
	}

	require.NoError(t, r.Release(ctx))
	released := time.Now()
	require.NoError(t, <-upgraded)
	require.Less(t, time.Since(released), o.notifiedClaimantSleep()/2, "the reader's release event wakes the upgrade")
	require.NoError(t, u.Release(ctx))
	// Nothing either provider started outlives its Close: the bubble
	// would report a goroutine left blocked.
	require.NoError(t, readers.Close(ctx))
	require.NoError(t, upgrader.Close(ctx))
}
