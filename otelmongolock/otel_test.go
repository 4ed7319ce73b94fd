package otelmongolock_test

// The spans and metrics, recorded by the OpenTelemetry SDK's in-memory span
// recorder and manual metric reader, against the server.

import (
	"context"
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
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/otelmongolock"
)

// shortExpiry is the lease of the tests that wait for extensions or loss;
// the cadence is the default, a third of it. lossDetectionBound is how long
// a handle may take to notice that its document is gone.
const (
	shortExpiry        = 500 * time.Millisecond
	lossDetectionBound = shortExpiry/3 + 250*time.Millisecond
)

func boundedCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newProvider returns a provider with opts for db, closed (its background
// work ended) before the test disconnects its clients and drops its
// database.
func newProvider(t *testing.T, db *mongo.Database, opts ...mongolock.Option) *mongolock.Provider {
	t.Helper()
	p, err := mongolock.NewProvider(db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func mustTryAcquire(t *testing.T, ctx context.Context, l *mongolock.Lock) *mongolock.Handle {
	t.Helper()
	h, err := l.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire(%q)", l.Name())
	return h
}

// pollUntil waits until cond holds, failing the test after within.
func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitClosed waits until ch is closed, failing the test after d.
func awaitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: still open after %v", what, d)
	}
}

// assert reports a failure from any goroutine.
func assert(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
}

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

// options are the options that send a provider's telemetry here, with
// otelmongolock's options otel, then more.
func (s *sdkTelemetry) options(otel []otelmongolock.Option, more ...mongolock.Option) []mongolock.Option {
	hooks := otelmongolock.Trace(append([]otelmongolock.Option{
		otelmongolock.WithTracerProvider(s.tp), otelmongolock.WithMeterProvider(s.mp)}, otel...)...)
	return append([]mongolock.Option{mongolock.WithTrace(hooks)}, more...)
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
	p := newProvider(t, traced, tel.options(nil, mongolock.WithBusyWaitSleep(5*time.Millisecond, 20*time.Millisecond))...)
	rival := newProvider(t, testdb.NewClient(t).Database(db.Name()))
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

	// A command per attempt, under the Acquire's span; and, as this is the
	// client's first use of the collection, the check of its collation.
	var finding, checks int
	for _, c := range tel.childrenOf(acq) {
		switch c.Name() {
		case "findAndModify":
			finding++
		case "listCollections":
			checks++
		default:
			require.Failf(t, "a command under the Acquire's span that is neither an attempt nor the collation check", "%s", c.Name())
		}
	}
	require.Equal(t, int(attempts), finding, "a command per attempt, under the Acquire's span")
	require.Equal(t, 1, checks, "the collection's collation checked once, under the first Acquire's span")
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
// release, and the count goes back to zero. Extensions are a span per batch of leases (a collection each), with the
// handles it covered and matched.
func TestHeldHandlesGoUpAndBackToZero(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	p := newProvider(t, db, tel.options(nil, mongolock.WithExpiry(shortExpiry))...)
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
		require.Equal(t, db.Name(), spanAttr(t, ext, "db.namespace").AsString())
	}
	// The duration is recorded as the extension's span ends, maybe just
	// after the span was seen.
	pollUntil(t, 5*time.Second, "both extensions' durations recorded", func() bool {
		return tel.total(t, "mongolock.extension.duration") >= 2
	})

	require.NoError(t, lock.Release(ctx))
	require.NoError(t, slot.Release(ctx))
	require.NoError(t, reader.Release(ctx))
	require.NoError(t, leader.Release(ctx))
	require.Equal(t, int64(0), held())
	for _, pt := range tel.points(t, "mongolock.handles.held") {
		require.Zero(t, pt.value, "%v", pt.attrs.ToSlice())
	}
	require.Equal(t, int64(4), tel.total(t, "mongolock.acquisitions"))
	require.Zero(t, tel.total(t, "mongolock.losses"))
}

// The Acquire calls that wait for a lock held by another process count
// as pending, with the lock's attributes, from their call until they give
// up (ctx ends) or acquire; a refused TryAcquire does not; the count goes
// back to zero.
func TestWaitingCallsArePendingUntilTheyGiveUpOrAcquire(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	p := newProvider(t, db, tel.options(nil)...)
	held := mustTryAcquire(t, ctx, newProvider(t, db).Lock("queue"))
	pending := func() int64 {
		return tel.total(t, "mongolock.acquire.pending", attribute.String("mongolock.kind", "lock"),
			attribute.String("db.collection.name", mongolock.DefaultCollection), attribute.String("db.namespace", db.Name()))
	}

	short, cancel := context.WithCancel(ctx)
	defer cancel()
	givesUp, acquired := make(chan error, 1), make(chan *mongolock.Handle, 1)
	go func() {
		_, err := p.Lock("queue").Acquire(short)
		givesUp <- err
	}()
	go func() {
		h, err := p.Lock("queue").Acquire(ctx)
		assert(t, err == nil, "Acquire: %v", err)
		acquired <- h
	}()
	pollUntil(t, 5*time.Second, "two calls pending", func() bool { return pending() == 2 })
	_, err := p.Lock("queue").TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.Equal(t, int64(2), pending(), "after a refused TryAcquire")

	cancel()
	require.ErrorIs(t, <-givesUp, context.Canceled)
	require.Equal(t, int64(1), pending(), "one gave up")
	require.NoError(t, held.Release(ctx))
	h := <-acquired
	require.Equal(t, int64(0), pending(), "the other acquired")
	require.NoError(t, h.Release(ctx))
	for _, pt := range tel.points(t, "mongolock.acquire.pending") {
		require.Zero(t, pt.value, "%v", pt.attrs.ToSlice())
	}
}

// A lock taken over (its document deleted) is a loss for that reason.
func TestADeletedDocumentIsALossTakenOver(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	tel := newSDKTelemetry(t)
	p := newProvider(t, db, tel.options(nil, mongolock.WithExpiry(shortExpiry))...)
	h := mustTryAcquire(t, ctx, p.Lock("deleted"))
	_, err := db.Collection(mongolock.DefaultCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "deleted"}})
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

// With WithNamesInSpans(false), no span, event, status or metric carries
// the lock's name, whatever the operation and its outcome; by default
// spans carry it and metrics do not, and WithNamesInMetrics(true) puts it
// on the metrics.
func TestNoAttributeCarriesTheLockNameWhenNamesAreOff(t *testing.T) {
	const name = "secret-name-4f1c"
	exercise := func(t *testing.T, opts ...otelmongolock.Option) *sdkTelemetry {
		ctx := boundedCtx(t, time.Minute)
		db := testdb.Database(t)
		tel := newSDKTelemetry(t)
		p := newProvider(t, db, tel.options(opts, mongolock.WithExpiry(shortExpiry))...)

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
		_, err = db.Collection(mongolock.DefaultCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: name + "-election"}})
		require.NoError(t, err)
		require.ErrorIs(t, leader.Proclaim(ctx, "x"), mongolock.ErrLockLost)
		require.ErrorIs(t, leader.Release(ctx), mongolock.ErrLockLost)
		require.NoError(t, p.Close(ctx)) // and its background work
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
		tel := exercise(t, otelmongolock.WithNamesInSpans(false))
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
		_, inMetrics := where(t, exercise(t, otelmongolock.WithNamesInMetrics(true)))
		require.Contains(t, inMetrics, "mongolock.handles.held")
		require.Contains(t, inMetrics, "mongolock.acquire.duration")
		require.Contains(t, inMetrics, "mongolock.losses")
	})
}

// A loss counts with its reason and an orphan released counts, each with
// the lock's kind and collection (the hooks called as the provider calls
// them: their causes are mongolock's tests).
func TestLossesAndOrphansAreCountedWithTheirAttributes(t *testing.T) {
	tel := newSDKTelemetry(t)
	hooks := otelmongolock.Trace(otelmongolock.WithTracerProvider(tel.tp), otelmongolock.WithMeterProvider(tel.mp))
	lock := mongolock.TraceLock{Name: "n", Kind: mongolock.KindSemaphore, Slots: 3, Database: "db", Collection: "coll"}
	hooks.Lost(mongolock.LossInfo{Lock: lock, Reason: "expired"})
	hooks.Lost(mongolock.LossInfo{Lock: lock, Reason: "client_closed"})
	hooks.OrphanReleased(lock)
	require.Equal(t, int64(1), tel.total(t, "mongolock.losses", attribute.String("mongolock.loss.reason", "expired"),
		attribute.String("mongolock.kind", "semaphore"), attribute.Int("mongolock.semaphore.slots", 3),
		attribute.String("db.collection.name", "coll"), attribute.String("db.namespace", "db")))
	require.Equal(t, int64(2), tel.total(t, "mongolock.losses"))
	require.Equal(t, int64(1), tel.total(t, "mongolock.orphans.released", attribute.String("mongolock.kind", "semaphore")))
	for _, pt := range tel.points(t, "mongolock.losses") {
		_, named := pt.attrs.Value("mongolock.lock.name")
		require.False(t, named, "names are not in metrics by default")
	}
}

// A nil provider, as no option, is the global one.
func TestNilProvidersAreTheGlobalOnes(t *testing.T) {
	tel := newSDKTelemetry(t)
	prevT, prevM := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(tel.tp)
	otel.SetMeterProvider(tel.mp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prevT)
		otel.SetMeterProvider(prevM)
	})
	hooks := otelmongolock.Trace(otelmongolock.WithTracerProvider(nil), otelmongolock.WithMeterProvider(nil))
	lock := mongolock.TraceLock{Name: "n", Kind: mongolock.KindLock, Database: "db", Collection: "coll"}
	ctx := hooks.ReleaseStart(context.Background(), mongolock.ReleaseStartInfo{Lock: lock, Operation: "release", FencingToken: 7})
	hooks.ReleaseDone(ctx, mongolock.ReleaseDoneInfo{Lock: lock, Operation: "release", FencingToken: 7,
		TraceResult: mongolock.TraceResult{Outcome: "released"}})
	hooks.Acquired(lock)
	spans := tel.ended("mongolock.release")
	require.Len(t, spans, 1)
	require.Equal(t, int64(7), spanAttr(t, spans[0], "mongolock.fencing_token").AsInt64())
	require.Equal(t, int64(1), tel.total(t, "mongolock.handles.held"))
}

// A hand-over is on the Release's span (handed over or not) and on the
// span of the Acquire that got it; a call that failed is a span with the
// status Error, its error.type, and a description without the lock's name
// (the hooks called as the provider calls them: their causes are
// mongolock's tests).
func TestHandOversAndErrorsAreOnTheSpans(t *testing.T) {
	tel := newSDKTelemetry(t)
	hooks := otelmongolock.Trace(otelmongolock.WithTracerProvider(tel.tp), otelmongolock.WithMeterProvider(tel.mp))
	lock := mongolock.TraceLock{Name: "secret", Kind: mongolock.KindLock, Database: "db", Collection: "coll"}
	bg := context.Background()

	ctx := hooks.ReleaseStart(bg, mongolock.ReleaseStartInfo{Lock: lock, Operation: "release", FencingToken: 1})
	hooks.HandOver(ctx, mongolock.HandOverInfo{Lock: lock, HandedOver: true})
	hooks.ReleaseDone(ctx, mongolock.ReleaseDoneInfo{Lock: lock, Operation: "release", FencingToken: 1,
		TraceResult: mongolock.TraceResult{Outcome: "released"}})
	ctx = hooks.AcquireStart(bg, mongolock.AcquireStartInfo{Lock: lock, Operation: "acquire"})
	hooks.AcquireDone(ctx, mongolock.AcquireDoneInfo{Lock: lock, Operation: "acquire", FencingToken: 2, HandedOver: true,
		TraceResult: mongolock.TraceResult{Outcome: "acquired"}})
	rel, acq := tel.ended("mongolock.release"), tel.ended("mongolock.acquire")
	require.Len(t, rel, 1)
	require.Len(t, acq, 1)
	require.True(t, spanAttr(t, rel[0], "mongolock.handed_over").AsBool())
	require.True(t, spanAttr(t, acq[0], "mongolock.handed_over").AsBool())
	require.Equal(t, int64(2), spanAttr(t, acq[0], "mongolock.fencing_token").AsInt64())
	require.Equal(t, int64(1), tel.total(t, "mongolock.acquire.duration", attribute.String("mongolock.operation", "acquire"),
		attribute.String("mongolock.outcome", "acquired")))

	failed := &mongolock.Error{Op: "try acquire", Name: "secret", Err: mongolock.ErrClosed}
	ctx = hooks.AcquireStart(bg, mongolock.AcquireStartInfo{Lock: lock, Operation: "try_acquire"})
	hooks.AcquireAttempt(ctx, mongolock.AttemptInfo{Lock: lock, Operation: "try_acquire", Attempt: 1,
		TraceResult: mongolock.TraceResult{Err: failed, Outcome: "error", ErrorType: "closed"}})
	hooks.AcquireDone(ctx, mongolock.AcquireDoneInfo{Lock: lock, Operation: "try_acquire", Attempts: 1,
		TraceResult: mongolock.TraceResult{Err: failed, Outcome: "error", ErrorType: "closed"}})
	try := tel.ended("mongolock.try_acquire")
	require.Len(t, try, 1)
	require.Equal(t, codes.Error, try[0].Status().Code)
	require.Equal(t, mongolock.ErrClosed.Error(), try[0].Status().Description)
	require.Equal(t, "closed", spanAttr(t, try[0], "error.type").AsString())
	_, hasToken := lookupAttr(try[0], "mongolock.fencing_token")
	require.False(t, hasToken, "no handle, no token")
	require.Len(t, try[0].Events(), 1)
	require.Contains(t, try[0].Events()[0].Attributes, attribute.String("error.type", "closed"))
}
