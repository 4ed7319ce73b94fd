package mongolock_test

// Telemetry: spans, metrics and logs, recorded by the OpenTelemetry SDK's
// in-memory span recorder and manual metric reader, against the server.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// sdkTelemetry is an SDK tracer provider that records every span in
// memory, and a meter provider read on demand.
type sdkTelemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newSDKTelemetry(t *testing.T) *sdkTelemetry {
	s := &sdkTelemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() {
		_ = s.tp.Shutdown(context.Background())
		_ = s.mp.Shutdown(context.Background())
	})
	return s
}

// options are the options that send a provider's telemetry here, then
// more.
func (s *sdkTelemetry) options(more ...mongolock.Option) []mongolock.Option {
	return append([]mongolock.Option{mongolock.WithTracerProvider(s.tp), mongolock.WithMeterProvider(s.mp)}, more...)
}

// ended returns the ended spans called name.
func (s *sdkTelemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.spans.Ended() {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// childrenOf returns the ended spans whose parent is span.
func (s *sdkTelemetry) childrenOf(span sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.spans.Ended() {
		if sp.Parent().SpanID() == span.SpanContext().SpanID() {
			out = append(out, sp)
		}
	}
	return out
}

// point is a metric's data point: its attributes, and its value (a sum's)
// or count (a histogram's).
type point struct {
	attrs attribute.Set
	value int64
}

// points reads the metrics now, and returns the points of the metric
// called name.
func (s *sdkTelemetry) points(t *testing.T, name string) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	var out []point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, dp.Value})
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, int64(dp.Count)})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, int64(dp.Count)})
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

// total adds up the points of the metric called name that have every
// attribute of want.
func (s *sdkTelemetry) total(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	var n int64
	for _, p := range s.points(t, name) {
		all := true
		for _, kv := range want {
			v, ok := p.attrs.Value(kv.Key)
			all = all && ok && v == kv.Value
		}
		if all {
			n += p.value
		}
	}
	return n
}

// spanAttr returns the attribute key of span, failing the test if it has
// none.
func spanAttr(t *testing.T, span sdktrace.ReadOnlySpan, key string) attribute.Value {
	t.Helper()
	v, ok := lookupAttr(span, key)
	require.True(t, ok, "span %s has no %s: %v", span.Name(), key, span.Attributes())
	return v
}

// lookupAttr returns the attribute key of span, if it has it.
func lookupAttr(span sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range span.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// driverSpans is a command monitor that starts a span for each command,
// a child of the span in the context the driver passes with the command,
// and ends it with the reply: what an instrumentation of the driver does.
// finds counts the findAndModify commands started.
func driverSpans(tp trace.TracerProvider, finds *atomic.Int64) *event.CommandMonitor {
	tracer := tp.Tracer("driver")
	var mu sync.Mutex
	open := map[int64]trace.Span{}
	end := func(id int64) {
		mu.Lock()
		span := open[id]
		delete(open, id)
		mu.Unlock()
		if span != nil {
			span.End()
		}
	}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			_, span := tracer.Start(ctx, e.CommandName)
			mu.Lock()
			open[e.RequestID] = span
			mu.Unlock()
			if e.CommandName == "findAndModify" {
				finds.Add(1)
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { end(e.RequestID) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { end(e.RequestID) },
	}
}

// An Acquire that waits is one span, a child of the caller's, that says
// how many attempts it made, with an event for each refused one, what it
// acquired (fencing token) and where; the driver's commands, given the
// span's context, are its children: one findAndModify per attempt. Its
// Release is a span of its own, with the release's update as its child.
func TestAContendedAcquireIsOneSpanWithItsAttemptsAndTheDriversCommandsAsChildren(t *testing.T) {
	const name = "contended"
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	var finds atomic.Int64
	traced := testdb.NewClient(t, options.Client().SetMonitor(driverSpans(tel.tp, &finds))).Database(db.Name())
	p := newProvider(t, traced, tel.options(mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))...)
	rival := newProvider(t, ownClient(t, db, nil))
	held := mustTryAcquire(t, ctx, rival.Lock(name))

	callerCtx, caller := tel.tp.Tracer("test").Start(ctx, "caller")
	got := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := p.Lock(name).Acquire(callerCtx)
		assert(t, err == nil, "Acquire: %v", err)
		got <- h
	}()
	pollUntil(t, 10*time.Second, "three refused attempts", func() bool { return finds.Load() >= 3 })
	require.NoError(t, held.Release(ctx))
	h := <-got
	require.NotNil(t, h)
	require.NoError(t, h.Release(callerCtx))
	caller.End()
	mongolock.WaitBackground(p)

	acquires := tel.ended("mongolock.acquire")
	require.Len(t, acquires, 1)
	acq := acquires[0]
	require.Equal(t, caller.SpanContext().SpanID(), acq.Parent().SpanID(), "the caller's span is the parent")
	require.Equal(t, "acquired", spanAttr(t, acq, "mongolock.outcome").AsString())
	require.Equal(t, h.FencingToken(), spanAttr(t, acq, "mongolock.fencing_token").AsInt64())
	require.Equal(t, name, spanAttr(t, acq, "mongolock.lock.name").AsString())
	require.Equal(t, "lock", spanAttr(t, acq, "mongolock.kind").AsString())
	require.Equal(t, "mongodb", spanAttr(t, acq, "db.system.name").AsString())
	require.Equal(t, db.Name(), spanAttr(t, acq, "db.namespace").AsString())
	require.Equal(t, mongolock.DefaultCollection, spanAttr(t, acq, "db.collection.name").AsString())
	require.False(t, spanAttr(t, acq, "mongolock.handed_over").AsBool())
	require.Positive(t, spanAttr(t, acq, "mongolock.wait.duration").AsFloat64())
	require.Equal(t, codes.Unset, acq.Status().Code)
	attempts := spanAttr(t, acq, "mongolock.attempts").AsInt64()
	require.GreaterOrEqual(t, attempts, int64(3))
	require.Len(t, acq.Events(), int(attempts-1), "an event per refused attempt")
	for _, e := range acq.Events() {
		require.Equal(t, "mongolock.attempt", e.Name)
		require.Contains(t, e.Attributes, attribute.String("mongolock.outcome", "not_acquired"))
	}

	children := tel.childrenOf(acq)
	require.Len(t, children, int(attempts), "a command per attempt, under the Acquire's span")
	for _, c := range children {
		require.Equal(t, "findAndModify", c.Name())
	}
	require.Equal(t, attempts, finds.Load(), "every findAndModify the client sent is a child of the span")

	releases := tel.ended("mongolock.release")
	require.Len(t, releases, 1)
	rel := releases[0]
	require.Equal(t, caller.SpanContext().SpanID(), rel.Parent().SpanID())
	require.Equal(t, "released", spanAttr(t, rel, "mongolock.outcome").AsString())
	require.Equal(t, h.FencingToken(), spanAttr(t, rel, "mongolock.fencing_token").AsInt64())
	relChildren := tel.childrenOf(rel)
	require.Len(t, relChildren, 1)
	require.Equal(t, "update", relChildren[0].Name())

	require.Equal(t, int64(1), tel.total(t, "mongolock.acquire.duration", attribute.String("mongolock.outcome", "acquired")))
	require.Equal(t, int64(1), tel.total(t, "mongolock.acquire.attempts", attribute.String("mongolock.operation", "acquire")))
}

// The handles of every kind count as held from their acquisition to their
// release, and the count goes back to zero; a hand-over within the process
// is one more acquisition, and the handle handed over is held in its turn.
// Extensions are a span per batch of leases (a collection each), with the
// handles it covered and matched.
func TestHeldHandlesGoUpAndBackToZero(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	tel := newSDKTelemetry(t)
	p := newProvider(t, e.db, tel.options(mongolock.WithExpiry(shortExpiry))...)
	held := func() int64 { return tel.total(t, "mongolock.handles.held") }

	lock := mustTryAcquire(t, ctx, p.Lock("lock"))
	slot, err := p.Semaphore("semaphore", 2).TryAcquire(ctx)
	require.NoError(t, err)
	reader, err := p.RWLock("rwlock").Reader().TryAcquire(ctx)
	require.NoError(t, err)
	leader, err := p.Election("election").Campaign(ctx, "me")
	require.NoError(t, err)
	require.Equal(t, int64(4), held())
	for _, k := range []string{"lock", "semaphore", "rwlock", "election"} {
		require.Equal(t, int64(1), tel.total(t, "mongolock.handles.held", attribute.String("mongolock.kind", k)), k)
	}
	require.Equal(t, int64(1), tel.total(t, "mongolock.handles.held", attribute.String("mongolock.rwlock.mode", "read")))

	// Kept: each collection's leases are extended together, two each.
	for _, coll := range []string{mongolock.DefaultCollection, mongolock.DefaultCollection + "_semaphores"} {
		var ext sdktrace.ReadOnlySpan
		pollUntil(t, 5*time.Second, "an extension of both leases of "+coll, func() bool {
			for _, s := range tel.ended("mongolock.extend") {
				if spanAttr(t, s, "db.collection.name").AsString() == coll && spanAttr(t, s, "mongolock.handles").AsInt64() == 2 {
					ext = s
				}
			}
			return ext != nil
		})
		require.Equal(t, int64(2), spanAttr(t, ext, "mongolock.matched").AsInt64(), coll)
		require.Equal(t, int64(0), spanAttr(t, ext, "mongolock.lost").AsInt64(), coll)
		require.Equal(t, "extended", spanAttr(t, ext, "mongolock.outcome").AsString(), coll)
		require.Equal(t, e.db.Name(), spanAttr(t, ext, "db.namespace").AsString())
	}
	require.GreaterOrEqual(t, tel.total(t, "mongolock.extension.duration"), int64(2))

	// A release hands the lock over to an Acquire of the same process.
	got := make(chan *mongolock.Handle, 1)
	go func() {
		h, err := p.Lock("lock").Acquire(ctx)
		assert(t, err == nil, "Acquire: %v", err)
		got <- h
	}()
	awaitQueueLen(t, p, "lock", 1)
	require.NoError(t, lock.Release(ctx))
	next := <-got
	require.NotNil(t, next)
	require.Equal(t, int64(4), held())
	require.Equal(t, int64(2), tel.total(t, "mongolock.acquisitions", attribute.String("mongolock.kind", "lock")))
	handOvers := 0
	for _, s := range tel.ended("mongolock.release") {
		if v, ok := lookupAttr(s, "mongolock.handed_over"); ok && v.AsBool() {
			handOvers++
		}
	}
	require.Equal(t, 1, handOvers, "the release span says it handed over")
	var acq []sdktrace.ReadOnlySpan // the Acquire's; the campaign's is of kind election
	for _, s := range tel.ended("mongolock.acquire") {
		if spanAttr(t, s, "mongolock.kind").AsString() == "lock" {
			acq = append(acq, s)
		}
	}
	require.Len(t, acq, 1)
	require.True(t, spanAttr(t, acq[0], "mongolock.handed_over").AsBool())
	require.Zero(t, spanAttr(t, acq[0], "mongolock.attempts").AsInt64(), "it waited for the hand-over")

	require.NoError(t, next.Release(ctx))
	require.NoError(t, slot.Release(ctx))
	require.NoError(t, reader.Release(ctx))
	require.NoError(t, leader.Resign(ctx))
	require.Equal(t, int64(0), held())
	for _, pt := range tel.points(t, "mongolock.handles.held") {
		require.Zero(t, pt.value, "%v", pt.attrs.ToSlice())
	}
	require.Equal(t, int64(5), tel.total(t, "mongolock.acquisitions"))
	require.Zero(t, tel.total(t, "mongolock.losses"))
}

// A partitioned holder loses its lock once: the loss is counted once, with
// its reason (the lease expired), logged once, and its handle no longer
// counts as held; the Release that follows reports the loss and counts
// nothing more.
func TestAPartitionIsOneLossCountedWithItsReason(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	px, pdb := proxied(t, db)
	p := newProvider(t, pdb, tel.options(mongolock.WithExpiry(faultExpiry), mongolock.WithLogger(logger))...)

	h := mustTryAcquire(t, ctx, p.Lock("partitioned"))
	require.Equal(t, int64(1), tel.total(t, "mongolock.handles.held"))
	px.Blackhole()
	awaitClosed(t, h.Lost(), 3*faultExpiry, "Lost")
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses"))
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses", attribute.String("mongolock.loss.reason", "expired")))
	require.Equal(t, int64(0), tel.total(t, "mongolock.handles.held"))

	px.Reset()
	require.NoError(t, px.Restore())
	require.ErrorIs(t, h.Release(ctx), mongolock.ErrLockLost)
	mongolock.WaitBackground(p)
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses"), "counted once")
	require.Equal(t, int64(0), tel.total(t, "mongolock.handles.held"))
	rel := tel.ended("mongolock.release")
	require.Len(t, rel, 1)
	require.Equal(t, "lost", spanAttr(t, rel[0], "mongolock.outcome").AsString())
	require.Equal(t, 1, strings.Count(logs.String(), `msg="mongolock: lock lost"`), "%s", logs.String())
	require.Contains(t, logs.String(), "level=WARN msg=\"mongolock: lock lost\" lock=partitioned")
	require.Contains(t, logs.String(), "reason=expired")
}

// A lock taken over (its document deleted) is a loss for that reason.
func TestADeletedDocumentIsALossTakenOver(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	e := newLockEnv(t)
	tel := newSDKTelemetry(t)
	p := newProvider(t, e.db, tel.options(mongolock.WithExpiry(shortExpiry))...)
	h := mustTryAcquire(t, ctx, p.Lock("deleted"))
	_, err := e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "deleted"}})
	require.NoError(t, err)
	awaitClosed(t, h.Lost(), lossDetectionBound, "Lost")
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses", attribute.String("mongolock.loss.reason", "taken_over")))
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses"))
	var lostInExtension int64
	for _, s := range tel.ended("mongolock.extend") {
		lostInExtension += spanAttr(t, s, "mongolock.lost").AsInt64()
	}
	require.Equal(t, int64(1), lostInExtension, "the extension span counts the handle it lost")
}

// An acquisition that took the lock but whose caller saw an error (a write
// concern error) is released in the background: one orphan released,
// counted and logged.
func TestAnOrphanReleasedInTheBackgroundIsCountedAndLogged(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	var logs syncbuf.Buffer
	p := newProvider(t, db, tel.options(mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	arm := replaceNextReply(p)
	require.NoError(t, mustTryAcquire(t, ctx, p.Lock("orphan")).Release(ctx)) // the document exists
	arm(wce(64))
	_, err := p.Lock("orphan").TryAcquire(ctx)
	require.Error(t, err)
	mongolock.WaitBackground(p)
	require.Equal(t, int64(1), tel.total(t, "mongolock.orphans.released"))
	require.Contains(t, logs.String(), "level=INFO msg=\"mongolock: released an acquisition nobody got a handle for\" lock=orphan")
	try := tel.ended("mongolock.try_acquire")
	require.Len(t, try, 2)
	require.Equal(t, "error", spanAttr(t, try[1], "mongolock.outcome").AsString())
	require.Equal(t, codes.Error, try[1].Status().Code)
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
	p := newProvider(t, db, mongolock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, mustTryAcquire(t, ctx, p.Lock("indexed")).Release(ctx))
	mongolock.WaitBackground(p)
	require.Contains(t, logs.String(), "level=INFO msg=\"mongolock: could not create the TTL index; idle lock documents stay in the collection\" collection=distributed_locks index=expiresAt_ttl")
}

// With WithNamesInSpans(false), no span, event, status or metric carries
// the lock's name, whatever the operation and its outcome; by default
// spans carry it and metrics do not, and WithNamesInMetrics(true) puts it
// on the metrics.
func TestNoAttributeCarriesTheLockNameWhenNamesAreOff(t *testing.T) {
	const name = "secret-name-4f1c"
	exercise := func(t *testing.T, opts ...mongolock.Option) *sdkTelemetry {
		ctx := boundedCtx(t, time.Minute)
		e := newLockEnv(t)
		tel := newSDKTelemetry(t)
		p := newProvider(t, e.db, tel.options(append([]mongolock.Option{mongolock.WithExpiry(shortExpiry)}, opts...)...)...)

		h := mustTryAcquire(t, ctx, p.Lock(name))
		_, err := p.Lock(name).TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = p.Lock(name).Acquire(short)
		cancel()
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		slot, err := p.Semaphore(name, 1).Acquire(ctx)
		require.NoError(t, err)
		_, err = p.Semaphore(name, 2).TryAcquire(ctx) // another n: an error
		require.Error(t, err)
		require.NotErrorIs(t, err, mongolock.ErrNotAcquired)
		writer, err := p.RWLock(name + "-rw").Writer().Acquire(ctx)
		require.NoError(t, err)
		leader, err := p.Election(name+"-election").Campaign(ctx, "v")
		require.NoError(t, err)
		require.NoError(t, leader.Proclaim(ctx, "w"))
		pollUntil(t, 5*time.Second, "an extension", func() bool { return len(tel.ended("mongolock.extend")) > 0 })
		for _, x := range []*mongolock.Handle{h, slot, writer} {
			require.NoError(t, x.Release(ctx))
		}
		// A loss, and a Proclaim that finds it.
		_, err = e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: name + "-election"}})
		require.NoError(t, err)
		require.ErrorIs(t, leader.Proclaim(ctx, "x"), mongolock.ErrLockLost)
		require.ErrorIs(t, leader.Resign(ctx), mongolock.ErrLockLost)
		mongolock.WaitBackground(p)
		return tel
	}
	// where lists the places of the name in the spans and the metrics.
	where := func(t *testing.T, tel *sdkTelemetry) (inSpans, inMetrics []string) {
		has := func(kvs []attribute.KeyValue) bool {
			for _, kv := range kvs {
				if strings.Contains(kv.Value.String(), "secret") {
					return true
				}
			}
			return false
		}
		require.NotEmpty(t, tel.spans.Ended())
		for _, s := range tel.spans.Ended() {
			if has(s.Attributes()) || strings.Contains(s.Name()+s.Status().Description, "secret") {
				inSpans = append(inSpans, s.Name())
			}
			for _, e := range s.Events() {
				if has(e.Attributes) {
					inSpans = append(inSpans, s.Name()+" event "+e.Name)
				}
			}
		}
		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(context.Background(), &rm))
		for _, m := range rm.ScopeMetrics[0].Metrics {
			for _, pt := range tel.points(t, m.Name) {
				if has(pt.attrs.ToSlice()) {
					inMetrics = append(inMetrics, m.Name)
				}
			}
		}
		return inSpans, inMetrics
	}
	t.Run("names off", func(t *testing.T) {
		tel := exercise(t, mongolock.WithNamesInSpans(false))
		outcomes := map[string]bool{}
		for _, s := range tel.spans.Ended() {
			outcomes[s.Name()+" "+spanAttr(t, s, "mongolock.outcome").AsString()] = true
		}
		for _, want := range []string{"mongolock.try_acquire acquired", "mongolock.try_acquire not_acquired", "mongolock.try_acquire error",
			"mongolock.acquire acquired", "mongolock.acquire not_acquired", "mongolock.release released", "mongolock.release lost",
			"mongolock.proclaim proclaimed", "mongolock.proclaim lost", "mongolock.extend extended"} {
			require.True(t, outcomes[want], "a span %s in %v", want, outcomes)
		}
		inSpans, inMetrics := where(t, tel)
		require.Empty(t, inSpans)
		require.Empty(t, inMetrics)
	})
	t.Run("default", func(t *testing.T) {
		inSpans, inMetrics := where(t, exercise(t))
		require.Contains(t, inSpans, "mongolock.acquire")
		require.Contains(t, inSpans, "mongolock.release")
		require.Empty(t, inMetrics)
	})
	t.Run("names in metrics", func(t *testing.T) {
		_, inMetrics := where(t, exercise(t, mongolock.WithNamesInMetrics(true)))
		require.Contains(t, inMetrics, "mongolock.handles.held")
		require.Contains(t, inMetrics, "mongolock.acquire.duration")
		require.Contains(t, inMetrics, "mongolock.losses")
	})
}

// The options refuse nil providers and loggers, naming the option.
func TestTelemetryOptionsRefuseNil(t *testing.T) {
	db := offlineDatabase(t)
	for opt, want := range map[string]mongolock.Option{
		"WithTracerProvider(nil)": mongolock.WithTracerProvider(nil),
		"WithMeterProvider(nil)":  mongolock.WithMeterProvider(nil),
		"WithLogger(nil)":         mongolock.WithLogger(nil),
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
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&defaults, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	e := newLockEnv(t, mongolock.WithExpiry(shortExpiry))
	_, err := e.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("my_expiresAt"),
	})
	require.NoError(t, err)

	h := mustTryAcquire(t, ctx, e.p.Lock("lost"))
	_, err = e.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "lost"}})
	require.NoError(t, err)
	awaitClosed(t, h.Lost(), lossDetectionBound, "Lost")
	require.NoError(t, mustTryAcquire(t, ctx, e.p.Lock("orphan")).Release(ctx)) // the document exists
	replaceNextReply(e.p)(wce(64))
	_, err = e.p.Lock("orphan").TryAcquire(ctx)
	require.Error(t, err)
	mongolock.WaitBackground(e.p)
	require.Empty(t, defaults.String())
}
