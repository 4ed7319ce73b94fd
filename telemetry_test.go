package mongolock_test

// Telemetry: the hooks of WithTrace, recorded, and the log records, against
// the server, and over the model in simulated time where a fault must come
// at a chosen instant. The OpenTelemetry spans and metrics made with the
// hooks are otelmongolock's tests.

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/mongolocktest"
)

// traceRecorder records the events of its Trace's hooks as lines:
// "acquire-done <op> <name> <outcome> attempts=<n> handedOver=<b>" and
// the like.
type traceRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *traceRecorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

// with returns the events that begin with prefix.
func (r *traceRecorder) with(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// trace returns hooks that record into r; the contexts of the calls carry
// callKey, so that the end hooks can check they get the start hooks'.
func (r *traceRecorder) trace() *mongolock.Trace {
	start := func(ctx context.Context, what string) context.Context {
		return context.WithValue(ctx, callKey{}, what)
	}
	ctxOf := func(ctx context.Context) any { return ctx.Value(callKey{}) }
	return &mongolock.Trace{
		AcquireStart: func(ctx context.Context, i mongolock.AcquireStartInfo) context.Context {
			r.add("acquire-start %s %s %s", i.Operation, i.Lock.Name, i.Lock.Kind)
			return start(ctx, i.Operation)
		},
		AcquireAttempt: func(ctx context.Context, i mongolock.AttemptInfo) {
			r.add("attempt %v %s %d %s %s", ctxOf(ctx), i.Lock.Name, i.Attempt, i.Outcome, i.ErrorType)
		},
		AcquireDone: func(ctx context.Context, i mongolock.AcquireDoneInfo) {
			r.add("acquire-done %v %s %s attempts=%d handedOver=%v token=%v", ctxOf(ctx), i.Lock.Name, i.Outcome, i.Attempts, i.HandedOver, i.FencingToken > 0)
		},
		ReleaseStart: func(ctx context.Context, i mongolock.ReleaseStartInfo) context.Context {
			r.add("release-start %s %s", i.Operation, i.Lock.Name)
			return start(ctx, i.Operation)
		},
		HandOver: func(ctx context.Context, i mongolock.HandOverInfo) {
			r.add("hand-over %v %s %v", ctxOf(ctx), i.Lock.Name, i.HandedOver)
		},
		ReleaseDone: func(ctx context.Context, i mongolock.ReleaseDoneInfo) {
			r.add("release-done %v %s %s", ctxOf(ctx), i.Lock.Name, i.Outcome)
		},
		Acquired: func(l mongolock.TraceLock) { r.add("acquired %s %s %s %d", l.Name, l.Kind, l.Mode, l.Slots) },
		Unheld:   func(l mongolock.TraceLock) { r.add("unheld %s", l.Name) },
		Lost:     func(i mongolock.LossInfo) { r.add("lost %s %s", i.Lock.Name, i.Reason) },
		ExtendStart: func(ctx context.Context, i mongolock.ExtendStartInfo) context.Context {
			return start(ctx, "extend")
		},
		ExtendDone: func(ctx context.Context, i mongolock.ExtendDoneInfo) {
			r.add("extend-done %v %s handles=%d matched=%d lost=%d %s", ctxOf(ctx), i.Collection, i.Handles, i.Matched, i.Lost, i.Outcome)
		},
		OrphanReleased: func(l mongolock.TraceLock) { r.add("orphan %s", l.Name) },
		IndexFailed:    func(i mongolock.IndexInfo) { r.add("index-failed %s %s", i.Collection, i.Index) },
	}
}

type callKey struct{}

// A partitioned holder loses its lock once: the loss is reported once,
// with its reason (the lease expired), before Lost closes, and logged once;
// the Release that follows reports the loss and nothing more.
func TestAPartitionIsOneLossReportedWithItsReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec traceRecorder
		var logs syncbuf.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		p, net := newMemDB(t).process(mongolock.WithExpiry(memExpiry), mongolock.WithLogger(logger), mongolock.WithTrace(rec.trace()))

		h := mustTryAcquire(t, ctx, p.Lock("partitioned"))
		net.Blackhole()
		awaitClosed(t, h.Lost(), memExpiry, "Lost")
		require.Equal(t, []string{"lost partitioned expired"}, rec.with("lost "))
		require.Equal(t, []string{"unheld partitioned"}, rec.with("unheld "))

		net.Heal()
		require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
		mongolock.WaitBackground(p)
		require.Len(t, rec.with("lost "), 1, "reported once")
		require.Len(t, rec.with("unheld "), 1)
		require.Equal(t, []string{"release-done release partitioned lost"}, rec.with("release-done "))
		require.Equal(t, 1, strings.Count(logs.String(), `msg="mongolock: lock lost"`), "%s", logs.String())
		require.Contains(t, logs.String(), "level=WARN msg=\"mongolock: lock lost\" lock=partitioned")
		require.Contains(t, logs.String(), "reason=expired")
	})
}

// A lock taken over (its document deleted) is a loss for that reason, and
// the extension that found it says so.
func TestADeletedDocumentIsALossTakenOver(t *testing.T) {
	conformance.Over(t, func(e *conformance.Env) {
		t := e.T
		var rec traceRecorder
		p, _, within := lossWatch(e, mongolock.WithTrace(rec.trace()))
		h := mustTryAcquire(t, e.Ctx, p.Lock("deleted"))
		e.Remove(mongolock.DefaultCollection, "deleted")
		awaitClosed(t, h.Lost(), within, "Lost")
		require.Equal(t, []string{"lost deleted taken_over"}, rec.with("lost "))
		require.Len(t, rec.with("extend-done extend "+mongolock.DefaultCollection+" handles=1 matched=0 lost=1 extended"), 1)
	})
}

// An acquisition that took the lock but whose caller saw an error (a write
// concern error) is released in the background: one orphan released,
// reported and logged; the TryAcquire's outcome is an error.
func TestAnOrphanReleasedInTheBackgroundIsReportedAndLogged(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	var rec traceRecorder
	var logs syncbuf.Buffer
	p := newProvider(t, db, mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), mongolock.WithTrace(rec.trace()))
	arm := replaceNextReply(p)
	require.NoError(t, mustTryAcquire(t, ctx, p.Lock("orphan")).Release(ctx)) // the document exists
	arm(wce(64))
	_, err := p.Lock("orphan").TryAcquire(ctx)
	require.Error(t, err)
	mongolock.WaitBackground(p)
	require.Equal(t, []string{"orphan orphan"}, rec.with("orphan "))
	require.Contains(t, logs.String(), "level=INFO msg=\"mongolock: released an acquisition nobody got a handle for\" lock=orphan")
	done := rec.with("acquire-done try_acquire orphan ")
	require.Len(t, done, 2)
	require.Equal(t, "acquire-done try_acquire orphan error attempts=1 handedOver=false token=false", done[1])
}

// Several WithTrace options are all called, in order, and a start hook
// gets the context the one before it returned; a Trace changed after
// NewProvider changes nothing.
func TestSeveralTracesAreAllCalledInOrder(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	var mu sync.Mutex
	var calls []string
	hooks := func(name string) *mongolock.Trace {
		return &mongolock.Trace{
			AcquireStart: func(ctx context.Context, _ mongolock.AcquireStartInfo) context.Context {
				return context.WithValue(ctx, callKey{}, fmt.Sprint(ctx.Value(callKey{}), "+", name))
			},
			AcquireDone: func(ctx context.Context, _ mongolock.AcquireDoneInfo) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, name+" sees "+fmt.Sprint(ctx.Value(callKey{})))
			},
		}
	}
	first, second := hooks("first"), hooks("second")
	p := newProvider(t, db, mongolock.WithTrace(first), mongolock.WithTrace(&mongolock.Trace{}), mongolock.WithTrace(second))
	first.AcquireDone = nil
	require.NoError(t, mustTryAcquire(t, ctx, p.Lock("twice")).Release(ctx))
	require.Equal(t, []string{"first sees <nil>+first+second", "second sees <nil>+first+second"}, calls)
}

// A TTL index that cannot be created (an index on expiresAt with another
// name and no TTL exists) is logged, and locking goes on.
func TestATTLIndexThatCannotBeCreatedIsLogged(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	_, err := db.Collection(mongolock.DefaultCollection).Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("my_expiresAt"),
	})
	require.NoError(t, err)
	var logs syncbuf.Buffer
	var rec traceRecorder
	p := newProvider(t, db, mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), mongolock.WithTrace(rec.trace()))
	require.NoError(t, mustTryAcquire(t, ctx, p.Lock("indexed")).Release(ctx))
	mongolock.WaitBackground(p)
	require.Contains(t, logs.String(), "level=INFO msg=\"mongolock: could not create the TTL index; idle lock documents stay in the collection\" collection=distributed_locks index=expiresAt_ttl")
	require.Equal(t, []string{"index-failed distributed_locks expiresAt_ttl"}, rec.with("index-failed "))
}

// The options refuse a nil Trace and a nil logger, naming the option.
func TestTelemetryOptionsRefuseNil(t *testing.T) {
	db := offlineDatabase(t)
	for opt, want := range map[string]mongolock.Option{
		"WithTrace(nil)":  mongolock.WithTrace(nil),
		"WithLogger(nil)": mongolock.WithLogger(nil),
	} {
		_, err := mongolock.NewProvider(db, want)
		require.ErrorContains(t, err, opt)
		requireInvalid(t, err, "new provider")
	}
}

// Without WithLogger the library logs nothing, not even through
// slog.Default: here a lock is lost, an orphan released and the TTL index
// refused.
func TestWithoutWithLoggerNothingIsLogged(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	var defaults syncbuf.Buffer
	defaultSlogTo(t, &defaults, &slog.HandlerOptions{Level: slog.LevelDebug})
	e := newLockEnv(t, stallProof...)
	_, err := e.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("my_expiresAt"),
	})
	require.NoError(t, err)

	h := mustTryAcquire(t, ctx, e.p.Lock("lost"))
	_, err = e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "lost"}})
	require.NoError(t, err)
	awaitClosed(t, h.Lost(), 10*time.Second, "Lost")
	require.NoError(t, mustTryAcquire(t, ctx, e.p.Lock("orphan")).Release(ctx)) // the document exists
	replaceNextReply(e.p)(wce(64))
	_, err = e.p.Lock("orphan").TryAcquire(ctx)
	require.Error(t, err)
	mongolock.WaitBackground(e.p)
	require.Empty(t, defaults.String())
}

// Over the model, in simulated time: each kind's handle is reported
// acquired with its kind, its lease's extensions per collection, with the
// context their start hook returned, a hand-over to an Acquire of the
// process as such, a Proclaim as a holder's write, and each release once,
// unheld.
func TestTraceOverTheModelReportsAHandlesWholeLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec traceRecorder
		p, _ := newMemDB(t).process(mongolock.WithExpiry(3*time.Second), mongolock.WithTrace(rec.trace()))

		lock := mustTryAcquire(t, ctx, p.Lock("lock"))
		slot, err := p.Semaphore("semaphore", 2).TryAcquire(ctx)
		require.NoError(t, err)
		reader, err := p.RWLock("rwlock").Reader().TryAcquire(ctx)
		require.NoError(t, err)
		leader, err := p.Election("election").Campaign(ctx, "me")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"acquired lock lock  0", "acquired semaphore semaphore  2",
			"acquired rwlock rwlock read 0", "acquired election election  0"}, rec.with("acquired "))
		require.Equal(t, []string{"attempt try_acquire lock 1 acquired "}, rec.with("attempt try_acquire lock "))
		require.Equal(t, []string{"acquire-done try_acquire lock acquired attempts=1 handedOver=false token=true"},
			rec.with("acquire-done try_acquire lock "))

		time.Sleep(3 * time.Second) // simulated: every lease is extended
		for _, coll := range []string{mongolock.DefaultCollection, mongolock.DefaultCollection + "_semaphores"} {
			require.NotEmpty(t, rec.with("extend-done extend "+coll+" handles=2 matched=2 lost=0 extended"), coll)
		}

		require.NoError(t, leader.Proclaim(ctx, "still me"))
		require.Equal(t, []string{"release-start proclaim election"}, rec.with("release-start proclaim "))
		require.Equal(t, []string{"release-done proclaim election proclaimed"}, rec.with("release-done proclaim "))

		next := make(chan *mongolock.Handle, 1)
		go func() {
			h, err := p.Lock("lock").Acquire(ctx)
			assert(t, err == nil, "Acquire: %v", err)
			next <- h
		}()
		synctest.Wait()
		require.Equal(t, 1, mongolock.QueueLen(p, "lock"))
		require.NoError(t, lock.Release(ctx))
		handedOver := <-next
		require.Equal(t, []string{"hand-over release lock true"}, rec.with("hand-over "))
		require.Equal(t, []string{"acquire-done acquire lock acquired attempts=0 handedOver=true token=true"}, rec.with("acquire-done acquire lock "))

		for _, h := range []*mongolock.Handle{handedOver, slot, reader} {
			require.NoError(t, h.Release(ctx))
		}
		require.NoError(t, leader.Release(ctx))
		require.ElementsMatch(t, []string{"unheld lock", "unheld lock", "unheld semaphore", "unheld rwlock", "unheld election"}, rec.with("unheld "))
		require.ElementsMatch(t, []string{"release-done release lock released", "release-done release lock released",
			"release-done release semaphore released", "release-done release rwlock released", "release-done release election released"},
			rec.with("release-done release "))
	})
}

// Over the model: a loss is reported once with its reason, "expired" (a
// partition outlasted the lease), "taken_over" (the document was deleted:
// the extension matched nothing) or "client_closed" (the client was
// disconnected: the extension failed for every handle, an error of that
// type); the Release that follows is an outcome "lost".
func TestTraceOverTheModelReportsEachLossWithItsReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const expiry = 3 * time.Second
		d := newMemDB(t)
		var rec traceRecorder
		var logs syncbuf.Buffer
		errorTypes := &mongolock.Trace{ExtendDone: func(_ context.Context, i mongolock.ExtendDoneInfo) {
			if i.Err != nil {
				rec.add("extend-error %s", i.ErrorType)
			}
		}}
		opts := []mongolock.Option{mongolock.WithExpiry(expiry), mongolock.WithTrace(rec.trace()), mongolock.WithTrace(errorTypes),
			mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}
		for _, tc := range []struct {
			name, reason, extension string
			lose                    func(net *memdb.Faults)
		}{
			{"partitioned", "expired", "", func(net *memdb.Faults) { net.Partition() }},
			{"deleted", "taken_over", " handles=1 matched=0 lost=1 extended", func(*memdb.Faults) {
				require.NoError(t, d.store.Do(ctx, mongolock.DefaultCollection, func(c *memdb.Table, now time.Time) error {
					_, err := c.DeleteOne(now, bson.D{{Key: "_id", Value: "deleted"}})
					return err
				}))
			}},
			{"disconnected", "client_closed", " handles=1 matched=0 lost=1 error", func(net *memdb.Faults) { net.Disconnect() }},
		} {
			p, net := d.process(opts...)
			h := mustTryAcquire(t, ctx, p.Lock(tc.name))
			tc.lose(net)
			awaitClosed(t, h.Lost(), 2*expiry, tc.name+" Lost")
			synctest.Wait() // the log record comes after the signal
			require.Equal(t, []string{"lost " + tc.name + " " + tc.reason}, rec.with("lost "+tc.name+" "))
			require.Equal(t, []string{"unheld " + tc.name}, rec.with("unheld "+tc.name))
			if tc.extension != "" {
				require.Len(t, rec.with("extend-done extend "+mongolock.DefaultCollection+tc.extension), 1, tc.name)
			}
			require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
			require.Equal(t, []string{"release-done release " + tc.name + " lost"}, rec.with("release-done release "+tc.name))
			require.Contains(t, logs.String(), "lock="+tc.name+" fencingToken=")
			require.Contains(t, logs.String(), "reason="+tc.reason)
			net.Heal()
		}
		require.Len(t, rec.with("lost "), 3, "each loss reported once")
		require.Subset(t, rec.with("extend-error "), []string{"extend-error transient", "extend-error client_closed"})
		require.Equal(t, 3, strings.Count(logs.String(), `level=WARN msg="mongolock: lock lost"`), "%s", logs.String())
		require.Contains(t, logs.String(), `level=DEBUG msg="mongolock: extension failed; retrying"`, "the partition's extensions")
	})
}

// Over the model: a call's outcome and error type say how it ended:
// acquired (after a transient refusal, retried and logged at Debug),
// not_acquired (no type: contention is no error), deadline_exceeded,
// canceled, closed, and _OTHER for an error retrying cannot fix.
func TestTraceOverTheModelClassifiesHowEachCallEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		var rec traceRecorder
		var logs syncbuf.Buffer
		p, net := d.process(mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
			mongolock.WithTrace(&mongolock.Trace{
				AcquireDone: func(_ context.Context, i mongolock.AcquireDoneInfo) {
					rec.add("%s %s %s %s", i.Operation, i.Lock.Name, i.Outcome, i.ErrorType)
					if i.Outcome == "acquired" {
						rec.add("attempts %d", i.Attempts)
					}
				},
			}))
		rival, _ := d.process()
		releaseAtCleanup(t, mustTryAcquire(t, ctx, rival.Lock("held")))

		_, err := p.Lock("held").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)

		mongolock.WaitBackground(p)
		net.Refuse(1)
		releaseAtCleanup(t, mustAcquire(t, ctx, p.Lock("refused once")))
		require.Contains(t, logs.String(), `level=DEBUG msg="mongolock: acquisition attempt failed; retrying" lock="refused once"`)

		// Cut short in an outage, not by contention.
		net.Partition()
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = p.Lock("outage").Acquire(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		canceled, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Second, cancel)
		_, err = p.Lock("outage").Acquire(canceled)
		require.ErrorIs(t, err, context.Canceled)
		net.Heal()
		mongolock.WaitBackground(p) // the withdrawals of their claims, which the refusal must not meet

		net.RefuseWith(1, mongo.CommandError{Code: 2, Name: "BadValue", Message: "refused for good"})
		_, err = p.Lock("bad").Acquire(ctx)
		require.ErrorContains(t, err, "refused for good")

		require.NoError(t, p.Close(ctx))
		_, err = p.Lock("closed").Acquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrClosed)

		require.Equal(t, []string{
			"try_acquire held not_acquired ",
			"acquire refused once acquired ", "attempts 2",
			"acquire outage error deadline_exceeded",
			"acquire outage error canceled",
			"acquire bad error _OTHER",
			"acquire closed error closed",
		}, rec.with(""))
	})
}

// everyHook returns a Trace each of whose hooks records "<name> <hook>";
// its start hooks add name to the context's callKey value.
func everyHook(rec *traceRecorder, name string) *mongolock.Trace {
	start := func(ctx context.Context, hook string) context.Context {
		rec.add("%s %s sees %v", name, hook, ctx.Value(callKey{}))
		return context.WithValue(ctx, callKey{}, fmt.Sprint(ctx.Value(callKey{}), "+", name))
	}
	add := func(hook string) { rec.add("%s %s", name, hook) }
	return &mongolock.Trace{
		AcquireStart: func(ctx context.Context, _ mongolock.AcquireStartInfo) context.Context {
			return start(ctx, "acquire-start")
		},
		AcquireAttempt: func(context.Context, mongolock.AttemptInfo) { add("attempt") },
		AcquireDone:    func(context.Context, mongolock.AcquireDoneInfo) { add("acquire-done") },
		Waiting:        func(mongolock.WaitingInfo) { add("waiting") },
		ReleaseStart: func(ctx context.Context, _ mongolock.ReleaseStartInfo) context.Context {
			return start(ctx, "release-start")
		},
		HandOver:    func(context.Context, mongolock.HandOverInfo) { add("hand-over") },
		ReleaseDone: func(context.Context, mongolock.ReleaseDoneInfo) { add("release-done") },
		Acquired:    func(mongolock.TraceLock) { add("acquired") },
		Unheld:      func(mongolock.TraceLock) { add("unheld") },
		Lost:        func(mongolock.LossInfo) { add("lost") },
		ExtendStart: func(ctx context.Context, _ mongolock.ExtendStartInfo) context.Context {
			return start(ctx, "extend-start")
		},
		ExtendDone:     func(context.Context, mongolock.ExtendDoneInfo) { add("extend-done") },
		OrphanReleased: func(mongolock.TraceLock) { add("orphan") },
		Abandoned:      func(mongolock.HandleInfo) { add("abandoned") },
		IndexFailed:    func(mongolock.IndexInfo) { add("index-failed") },
	}
}

// Over the model: with several WithTrace options, every hook of each is
// called, the first's before the second's, and a start hook gets the
// context the one before it returned; a WithTrace without hooks changes
// nothing. Here through a hand-over, extensions, a loss and a Handle
// dropped while held (released at the next tick, reported abandoned).
func TestTraceOverTheModelCallsEveryHookOfEachWithTraceInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec traceRecorder
		p, _ := newMemDB(t).process(mongolock.WithExpiry(3*time.Second),
			mongolock.WithTrace(everyHook(&rec, "first")), mongolock.WithTrace(&mongolock.Trace{}), mongolock.WithTrace(everyHook(&rec, "second")))

		held := mustTryAcquire(t, ctx, p.Lock("lock"))
		next := acquireInBackground(ctx, p.Lock("lock"))
		synctest.Wait()
		require.NoError(t, held.Release(ctx))
		require.NoError(t, <-next)
		lost := mustTryAcquire(t, ctx, p.Lock("lost"))
		time.Sleep(3 * time.Second) // simulated: an extension
		mongolocktest.Lose(lost)
		mongolock.Abandon(mustTryAcquire(t, ctx, p.Lock("dropped")))
		time.Sleep(3 * time.Second) // simulated: the next tick abandons it
		synctest.Wait()

		// Hooks of different goroutines (an extension, an acquisition)
		// may interleave: each second trace's call is matched with a call
		// of the first trace's that came before it and is not matched yet.
		events := rec.with("")
		seen := map[string]bool{}
		pending := map[string]int{} // the first trace's calls, as the second's would read
		for _, ev := range events {
			if hook, ok := strings.CutPrefix(ev, "first "); ok {
				if strings.HasSuffix(hook, " sees <nil>") {
					hook = strings.TrimSuffix(hook, "<nil>") + "<nil>+first"
				}
				pending[hook]++
				seen[strings.Fields(hook)[0]] = true
				continue
			}
			hook, ok := strings.CutPrefix(ev, "second ")
			require.True(t, ok, "%q is neither trace's: %q", ev, events)
			require.Positive(t, pending[hook], "%q comes before the first trace's hook: %q", ev, events)
			pending[hook]--
		}
		for hook, n := range pending {
			require.Zero(t, n, "the second trace's %s", hook)
		}
		for _, hook := range []string{"acquire-start", "attempt", "acquire-done", "waiting", "release-start", "hand-over", "release-done",
			"acquired", "unheld", "lost", "extend-start", "extend-done", "abandoned"} {
			require.True(t, seen[hook], "%s called: %q", hook, events)
		}
	})
}

// waitingCounter sums the Waiting hook's reports per lock name: +1 as a
// call joins its line, -1 as it leaves; it fails the test if a sum, or a
// reported Count, goes below zero.
type waitingCounter struct {
	t    *testing.T
	mu   sync.Mutex
	sums map[string]int
	last map[string]int // the last Count reported
}

// newWaitingCounter returns a counter of p's Waiting hook, and two
// processes over one model: other, and p.
func newWaitingCounter(t *testing.T) (count *waitingCounter, other, p *mongolock.Provider) {
	count = &waitingCounter{t: t}
	d := newMemDB(t)
	other, _ = d.process()
	p, _ = d.process(mongolock.WithTrace(count.trace()))
	return count, other, p
}

func (c *waitingCounter) trace() *mongolock.Trace {
	c.sums, c.last = map[string]int{}, map[string]int{}
	return &mongolock.Trace{Waiting: func(i mongolock.WaitingInfo) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sums[i.Lock.Name] += map[bool]int{true: 1, false: -1}[i.Waiting]
		c.last[i.Lock.Name] = i.Count
		assert(c.t, c.sums[i.Lock.Name] >= 0 && i.Count >= 0, "%s: %d waiting, %d reported", i.Lock.Name, c.sums[i.Lock.Name], i.Count)
	}}
}

// requireWaiting checks that n calls wait for name, by the sum and by the
// last Count reported.
func (c *waitingCounter) requireWaiting(name string, n int, when string) {
	c.t.Helper()
	synctest.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(c.t, n, c.sums[name], "sum, %s", when)
	require.Equal(c.t, n, c.last[name], "Count, %s", when)
}

// Over the model: the calls of a process that wait for a lock held by
// another are counted as they join the line, and as they leave it: one
// gives up (its ctx ends), one acquires when the holder releases, the one
// behind it ends as its provider closes. A TryAcquire refused waits in no
// line; the count never goes below zero and ends at zero.
func TestTraceOverTheModelCountsTheCallsWaitingForALock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		count, other, p := newWaitingCounter(t)
		held := mustTryAcquire(t, ctx, other.Lock("queue"))

		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		givesUp := acquireInBackground(short, p.Lock("queue"))
		count.requireWaiting("queue", 1, "one call waits")
		type got struct {
			h   *mongolock.Handle
			err error
		}
		acquired := make(chan got, 2)
		for n := 2; n <= 3; n++ {
			go func() {
				h, err := p.Lock("queue").Acquire(ctx)
				acquired <- got{h, err}
			}()
			// One at a time: the Counts of calls that join at once may be
			// reported out of order.
			count.requireWaiting("queue", n, "another call waits")
		}
		_, err := p.Lock("queue").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		count.requireWaiting("queue", 3, "after a refused TryAcquire")

		require.ErrorIs(t, <-givesUp, context.DeadlineExceeded)
		count.requireWaiting("queue", 2, "one gave up")

		require.NoError(t, held.Release(ctx))
		first := <-acquired
		require.NoError(t, first.err)
		count.requireWaiting("queue", 1, "one acquired, one waits behind it")

		require.NoError(t, p.Close(ctx))
		require.ErrorIs(t, (<-acquired).err, mongolock.ErrClosed)
		count.requireWaiting("queue", 0, "the provider closed")
	})
}

// Over the model: an Upgrade that waits for another process's reader to
// leave counts as waiting for its RWLock until it holds for writing.
func TestTraceOverTheModelCountsAnUpgradeWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		count, other, p := newWaitingCounter(t)
		reader, err := other.RWLock("rw").Reader().TryAcquire(ctx)
		require.NoError(t, err)
		u := mustTryUpgradeable(t, ctx, p.RWLock("rw").Upgradeable())
		count.requireWaiting("rw", 0, "a TryAcquire that acquired")

		upgraded := make(chan error, 1)
		go func() { upgraded <- u.Upgrade(ctx) }()
		count.requireWaiting("rw", 1, "the Upgrade waits for the reader")
		require.NoError(t, reader.Release(ctx))
		require.NoError(t, <-upgraded)
		count.requireWaiting("rw", 0, "upgraded")
		require.NoError(t, u.Release(ctx))
	})
}

// A test that replaces slog's default leaves the standard log package as it
// found it.
func TestDefaultSlogToPutsTheStandardLogBack(t *testing.T) {
	out, flags := log.Writer(), log.Flags()
	t.Run("replaced", func(t *testing.T) {
		var buf bytes.Buffer
		defaultSlogTo(t, &buf, nil)
		log.Print("to the buffer")
		require.Contains(t, buf.String(), "to the buffer")
	})
	require.Equal(t, out, log.Writer(), "the standard log's output")
	require.Equal(t, flags, log.Flags())
}

// A take-over reports as an acquisition call of its own operation,
// take_over, of the ticket's kind: its start, the handle made, its one
// round trip as its attempt, and its end with the taker's fencing token,
// the attempt and the end in the context the start hook returned. The
// holder, in this program, is lost at once for the reason taken_over.
func TestATakeOverIsAnAcquisitionCallOfItsOwn(t *testing.T) {
	for _, kind := range []mongolock.Kind{mongolock.KindLock, mongolock.KindElection} {
		t.Run(string(kind), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				d := newMemDB(t)
				var held, took traceRecorder
				var done []mongolock.AcquireDoneInfo
				holder, _ := d.process(mongolock.WithTrace(held.trace()))
				taker, _ := d.process(mongolock.WithTrace(took.trace()), mongolock.WithTrace(&mongolock.Trace{
					AcquireDone: func(_ context.Context, i mongolock.AcquireDoneInfo) { done = append(done, i) }}))
				var old, h *mongolock.Handle
				if kind == mongolock.KindLock {
					old = mustTryAcquire(t, ctx, holder.Lock("x"))
					h = must(taker.TakeOver(ctx, must(old.Ticket())))
				} else {
					old = must(holder.Election("x").Campaign(ctx, "v1")).Handle
					h = must(taker.Election("x").TakeOver(ctx, must(old.Ticket()), "v2")).Handle
				}
				require.Equal(t, []string{
					"acquire-start take_over x " + string(kind),
					"acquired x " + string(kind) + "  0",
					"attempt take_over x 1 acquired ",
					"acquire-done take_over x acquired attempts=1 handedOver=false token=true",
				}, took.with(""))
				require.Len(t, done, 1)
				require.Equal(t, h.FencingToken(), done[0].FencingToken)
				require.Equal(t, kind, done[0].Lock.Kind)
				require.Equal(t, []string{"lost x taken_over"}, held.with("lost "))
				require.Equal(t, []string{"unheld x"}, held.with("unheld "))
				require.NoError(t, h.Release(ctx))
			})
		})
	}
}

// A stale ticket (its acquisition released) is a take-over whose attempt
// and end say so, stale_ticket, with no error type: an outcome of the
// race, as not_acquired is, not a failure; no handle is made.
func TestAStaleTicketIsItsOwnOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		var rec traceRecorder
		holder, _ := d.process()
		taker, _ := d.process(mongolock.WithTrace(rec.trace()))
		old := must(holder.Semaphore("x", 2).Units(2).TryAcquire(ctx))
		ticket := must(old.Ticket())
		require.NoError(t, old.Release(ctx))
		_, err := taker.TakeOver(ctx, ticket)
		require.ErrorIs(t, err, mongolock.ErrStaleTicket)
		require.Equal(t, []string{
			"acquire-start take_over x semaphore",
			"attempt take_over x 1 stale_ticket ",
			"acquire-done take_over x stale_ticket attempts=1 handedOver=false token=false",
		}, rec.with(""))
	})
}

// lockTrace returns hooks that give every TraceLock they get to seen, with
// the hook's name.
func lockTrace(seen func(hook string, l mongolock.TraceLock)) *mongolock.Trace {
	return &mongolock.Trace{
		AcquireStart: func(ctx context.Context, i mongolock.AcquireStartInfo) context.Context {
			seen("AcquireStart", i.Lock)
			return ctx
		},
		AcquireAttempt: func(_ context.Context, i mongolock.AttemptInfo) { seen("AcquireAttempt", i.Lock) },
		AcquireDone:    func(_ context.Context, i mongolock.AcquireDoneInfo) { seen("AcquireDone", i.Lock) },
		Waiting:        func(i mongolock.WaitingInfo) { seen("Waiting", i.Lock) },
		ReleaseStart: func(ctx context.Context, i mongolock.ReleaseStartInfo) context.Context {
			seen("ReleaseStart", i.Lock)
			return ctx
		},
		HandOver:       func(_ context.Context, i mongolock.HandOverInfo) { seen("HandOver", i.Lock) },
		ReleaseDone:    func(_ context.Context, i mongolock.ReleaseDoneInfo) { seen("ReleaseDone", i.Lock) },
		Acquired:       func(l mongolock.TraceLock) { seen("Acquired", l) },
		Unheld:         func(l mongolock.TraceLock) { seen("Unheld", l) },
		Lost:           func(i mongolock.LossInfo) { seen("Lost", i.Lock) },
		OrphanReleased: func(l mongolock.TraceLock) { seen("OrphanReleased", l) },
		Abandoned:      func(i mongolock.HandleInfo) { seen("Abandoned", i.Lock) },
	}
}

// Every hook names a weighted semaphore's acquisition with its units and
// slots: its TryAcquire, an Acquire that waits in line and is handed the
// units by a release, the take-over of its ticket, the loss it makes and
// the releases. A plain semaphore's acquisition takes 1 unit; the other
// kinds' none.
func TestEveryHookSaysTheUnitsOfASemaphoresAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		var mu sync.Mutex
		units := map[string][]int{} // by name and hook: each TraceLock's units and slots
		trace := mongolock.WithTrace(lockTrace(func(hook string, l mongolock.TraceLock) {
			mu.Lock()
			defer mu.Unlock()
			units[l.Name+" "+hook] = append(units[l.Name+" "+hook], l.Units, l.Slots)
		}))
		p, _ := d.process(trace)
		taker, _ := d.process(trace)
		weighted := p.Semaphore("weighted", 4).Units(3)
		first := must(weighted.TryAcquire(ctx))
		waiting := start(func() (*mongolock.Handle, error) { return weighted.Acquire(ctx) })
		synctest.Wait() // refused, it waits in line
		require.NoError(t, first.Release(ctx))
		got := <-waiting
		require.NoError(t, got.err)
		second := got.h
		taken := must(taker.TakeOver(ctx, must(second.Ticket())))
		require.NoError(t, taken.Release(ctx))

		hooks := []string{"AcquireStart", "AcquireAttempt", "AcquireDone", "Waiting", "Acquired",
			"ReleaseStart", "HandOver", "ReleaseDone", "Unheld", "Lost"}
		for _, hook := range hooks {
			seen := units["weighted "+hook]
			require.NotEmpty(t, seen, "%s not called", hook)
			for i := 0; i < len(seen); i += 2 {
				require.Equal(t, []int{3, 4}, seen[i:i+2], "%s: units and slots", hook)
			}
		}

		releaseAtCleanup(t, must(p.Semaphore("plain", 2).TryAcquire(ctx)))
		releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("lock")))
		releaseAtCleanup(t, mustTryAcquire(t, ctx, p.RWLock("rw").Reader()))
		require.Equal(t, []int{1, 2}, units["plain Acquired"])
		require.Equal(t, []int{0, 0}, units["lock Acquired"])
		require.Equal(t, []int{0, 0}, units["rw Acquired"])
	})
}
