// Package otelmongolock makes OpenTelemetry spans and metrics of
// github.com/mongolock/mongolock's operations, through its hooks
// (mongolock.Trace). It is a module of its own, so that an application that
// uses mongolock without OpenTelemetry does not get its modules.
//
//	p, err := mongolock.NewProvider(db, mongolock.WithTrace(otelmongolock.Trace()))
//
// Spans: mongolock.acquire, mongolock.try_acquire, mongolock.take_over,
// mongolock.release, mongolock.proclaim and mongolock.extend. Metrics: mongolock.acquire.duration,
// mongolock.acquire.attempts, mongolock.acquire.pending,
// mongolock.acquisitions, mongolock.losses, mongolock.handles.held,
// mongolock.extension.duration, mongolock.orphans.released,
// mongolock.fleet.shards.running, mongolock.fleet.shards.stopped and
// mongolock.fleet.drain.duration. Their
// attributes follow the semantic conventions for databases where they have
// one.
package otelmongolock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock"
)

// instrumentation names the tracer and the meter.
const instrumentation = "github.com/mongolock/mongolock"

// spanPrefix begins every span name; an acquisition's, less the prefix, is
// its mongolock.operation.
const spanPrefix = "mongolock."

// Attribute keys: the semantic conventions' where they have one.
const (
	keySystem     = attribute.Key("db.system.name")
	keyNamespace  = attribute.Key("db.namespace")
	keyCollection = attribute.Key("db.collection.name")
	keyErrorType  = attribute.Key("error.type")
	keyName       = attribute.Key("mongolock.lock.name")
	keyKind       = attribute.Key("mongolock.kind")
	keyMode       = attribute.Key("mongolock.rwlock.mode")
	keySlots      = attribute.Key("mongolock.semaphore.slots")
	keyUnits      = attribute.Key("mongolock.semaphore.units")
	keyOperation  = attribute.Key("mongolock.operation")
	keyOutcome    = attribute.Key("mongolock.outcome")
	keyAttempts   = attribute.Key("mongolock.attempts")
	keyWaited     = attribute.Key("mongolock.wait.duration")
	keyToken      = attribute.Key("mongolock.fencing_token")
	keyHandedOver = attribute.Key("mongolock.handed_over")
	keyHandles    = attribute.Key("mongolock.handles")
	keyMatched    = attribute.Key("mongolock.matched")
	keyLost       = attribute.Key("mongolock.lost")
	keyReason     = attribute.Key("mongolock.loss.reason")
	keyFleet      = attribute.Key("mongolock.fleet.name")
	keyStop       = attribute.Key("mongolock.fleet.stop.reason")
)

// An Option configures Trace.
type Option func(*config)

type config struct {
	tracers                trace.TracerProvider
	meters                 metric.MeterProvider
	spanNames, metricNames bool
}

// WithTracerProvider sets where the spans go. Default (and for nil): the
// global provider, otel.GetTracerProvider(), which forwards to the one
// installed with otel.SetTracerProvider, also later.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tracers = tp
		}
	}
}

// WithMeterProvider sets where the metrics go. Default (and for nil): the
// global provider, otel.GetMeterProvider(), which forwards to the one
// installed with otel.SetMeterProvider, also later.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	}
}

// WithNamesInSpans sets whether spans carry the lock's name (attribute
// mongolock.lock.name, shortened past 64 bytes as mongolock.Error.Name is).
// Default true; turn it off when names are secret or personal.
func WithNamesInSpans(on bool) Option {
	return func(c *config) { c.spanNames = on }
}

// WithNamesInMetrics sets whether metrics carry the lock's name (attribute
// mongolock.lock.name), which makes a series per name: only for a small,
// fixed set of names. Default false.
func WithNamesInMetrics(on bool) Option {
	return func(c *config) { c.metricNames = on }
}

// Trace returns hooks, for mongolock.WithTrace, that make the spans and
// metrics of a provider's operations. The instruments are made once per
// call of Trace; its hooks may serve several providers.
//
// With no SDK installed, a hook costs a span context and an Enabled check:
// attributes are built only for a span that records or an instrument that
// is enabled.
func Trace(opts ...Option) *mongolock.Trace {
	c := config{tracers: otel.GetTracerProvider(), meters: otel.GetMeterProvider(), spanNames: true}
	for _, opt := range opts {
		opt(&c)
	}
	t := newTelemetry(c)
	return &mongolock.Trace{
		AcquireStart: t.acquireStart, AcquireAttempt: t.acquireAttempt, AcquireDone: t.acquireDone, Waiting: t.waiting,
		ReleaseStart: t.releaseStart, HandOver: t.handOver, ReleaseDone: t.releaseDone,
		Acquired: t.acquired, Unheld: t.unheld, Lost: t.lost,
		ExtendStart: t.extendStart, ExtendDone: t.extendDone,
		OrphanReleased: t.orphanReleased,
		ShardStarted:   t.shardStarted, ShardStopped: t.shardStopped,
	}
}

// telemetry is a tracer and the instruments.
type telemetry struct {
	tracer                 trace.Tracer
	spanNames, metricNames bool

	waited       metric.Float64Histogram   // acquisition call time
	attempts     metric.Int64Histogram     // attempts per acquisition call
	pending      metric.Int64UpDownCounter // acquisition calls waiting in their line
	acquisitions metric.Int64Counter       // handles made
	losses       metric.Int64Counter       // handles lost
	held         metric.Int64UpDownCounter
	extensions   metric.Float64Histogram   // extension round trips
	orphans      metric.Int64Counter       // acquisitions nobody got, released
	shards       metric.Int64UpDownCounter // fleet shards whose function runs
	stops        metric.Int64Counter       // fleet shards stopped, by reason
	drains       metric.Float64Histogram   // a moved or left shard's time to stop
}

func newTelemetry(c config) *telemetry {
	m := c.meters.Meter(instrumentation)
	secs := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	t := &telemetry{tracer: c.tracers.Tracer(instrumentation), spanNames: c.spanNames, metricNames: c.metricNames}
	var errs [11]error
	t.waited, errs[0] = m.Float64Histogram("mongolock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an Acquire, TryAcquire or TakeOver call to its return, by outcome."),
		metric.WithExplicitBucketBoundaries(secs...))
	t.attempts, errs[1] = m.Int64Histogram("mongolock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquisition attempts (round trips) per Acquire, TryAcquire or TakeOver call."),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000))
	t.acquisitions, errs[2] = m.Int64Counter("mongolock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Locks and slots acquired, hand-overs included."))
	t.losses, errs[3] = m.Int64Counter("mongolock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Handles lost while held, by reason."))
	t.held, errs[4] = m.Int64UpDownCounter("mongolock.handles.held", metric.WithUnit("{handle}"),
		metric.WithDescription("Handles that hold their lock or slot."))
	t.extensions, errs[5] = m.Float64Histogram("mongolock.extension.duration", metric.WithUnit("s"),
		metric.WithDescription("Round-trip time of one extension of a batch of leases."),
		metric.WithExplicitBucketBoundaries(secs[:13]...))
	t.orphans, errs[6] = m.Int64Counter("mongolock.orphans.released", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions nobody got a handle for, released in the background."))
	// Named as the conventions name a pool's waiting requests
	// (db.client.connection.pending_requests), under the acquisition's.
	t.pending, errs[7] = m.Int64UpDownCounter("mongolock.acquire.pending", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls of this process that wait in line for their lock."))
	t.shards, errs[8] = m.Int64UpDownCounter("mongolock.fleet.shards.running", metric.WithUnit("{shard}"),
		metric.WithDescription("Shards of fleets whose function runs in this process."))
	t.stops, errs[9] = m.Int64Counter("mongolock.fleet.shards.stopped", metric.WithUnit("{shard}"),
		metric.WithDescription("Shards of fleets whose function returned and which were released, by reason: moved ones are rebalances."))
	t.drains, errs[10] = m.Float64Histogram("mongolock.fleet.drain.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a moved or left shard's stop to its release."),
		metric.WithExplicitBucketBoundaries(secs...))
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
	}
	return t
}

// lockAttrs are the attributes of l (names: with its name), then extra. A
// semaphore's slots and units are in metrics too: the code that takes a
// semaphore fixes both, so they add few series, as its kind does.
func lockAttrs(l mongolock.TraceLock, names bool, extra ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 7+len(extra))
	kv = append(dbAttrs(kv, l.Database, l.Collection), keyKind.String(string(l.Kind)))
	switch {
	case l.Mode != "":
		kv = append(kv, keyMode.String(l.Mode))
	case l.Kind == mongolock.KindSemaphore:
		kv = append(kv, keySlots.Int(l.Slots), keyUnits.Int(l.Units))
	}
	if names {
		kv = append(kv, keyName.String(l.Name))
	}
	return append(kv, extra...)
}

// dbAttrs appends the semantic conventions' attributes of a collection to
// kv.
func dbAttrs(kv []attribute.KeyValue, db, coll string) []attribute.KeyValue {
	return append(kv, keySystem.String("mongodb"), keyNamespace.String(db), keyCollection.String(coll))
}

// measure returns the attributes of a measurement of l, then extra.
func (t *telemetry) measure(l mongolock.TraceLock, extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(lockAttrs(l, t.metricNames, extra...)...)
}

// start starts the span called name of a call on l, a child of ctx's span.
func (t *telemetry) start(ctx context.Context, name string, l mongolock.TraceLock) context.Context {
	ctx, span := t.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(lockAttrs(l, t.spanNames)...)
	}
	return ctx
}

// end ends ctx's span with r, marking it failed if its outcome is "error".
// Its status says the error without the lock's name: names may be off.
func end(ctx context.Context, r mongolock.TraceResult, kv ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		kv = append(kv, keyOutcome.String(r.Outcome))
		if r.Outcome == "error" {
			kv = append(kv, keyErrorType.String(r.ErrorType))
			err := r.Err
			var e *mongolock.Error
			if errors.As(err, &e) {
				err = e.Err
			}
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(kv...)
	}
	span.End()
}

func (t *telemetry) acquireStart(ctx context.Context, i mongolock.AcquireStartInfo) context.Context {
	return t.start(ctx, spanPrefix+i.Operation, i.Lock)
}

// acquireAttempt makes a refused or failed attempt an event of the call's
// span.
func (t *telemetry) acquireAttempt(ctx context.Context, i mongolock.AttemptInfo) {
	if span := trace.SpanFromContext(ctx); i.Err != nil && span.IsRecording() {
		kv := []attribute.KeyValue{keyOutcome.String(i.Outcome), keyAttempts.Int(i.Attempt)}
		if i.ErrorType != "" {
			kv = append(kv, keyErrorType.String(i.ErrorType))
		}
		span.AddEvent("mongolock.attempt", trace.WithAttributes(kv...))
	}
}

func (t *telemetry) acquireDone(ctx context.Context, i mongolock.AcquireDoneInfo) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		kv := []attribute.KeyValue{keyAttempts.Int(i.Attempts), keyWaited.Float64(i.Waited.Seconds())}
		if i.Err == nil {
			kv = append(kv, keyToken.Int64(i.FencingToken), keyHandedOver.Bool(i.HandedOver))
		}
		end(ctx, i.TraceResult, kv...)
	} else {
		span.End()
	}
	if t.waited.Enabled(ctx) || t.attempts.Enabled(ctx) {
		m := t.measure(i.Lock, keyOperation.String(i.Operation), keyOutcome.String(i.Outcome))
		t.waited.Record(ctx, i.Waited.Seconds(), m)
		t.attempts.Record(ctx, int64(i.Attempts), m)
	}
}

// waiting counts a call that joins its line up, one that leaves it down.
func (t *telemetry) waiting(i mongolock.WaitingInfo) {
	if ctx := context.Background(); t.pending.Enabled(ctx) {
		n := int64(-1)
		if i.Waiting {
			n = 1
		}
		t.pending.Add(ctx, n, t.measure(i.Lock))
	}
}

func (t *telemetry) releaseStart(ctx context.Context, i mongolock.ReleaseStartInfo) context.Context {
	return t.start(ctx, spanPrefix+i.Operation, i.Lock)
}

// handOver records on the release's span whether it handed the lock over.
func (t *telemetry) handOver(ctx context.Context, i mongolock.HandOverInfo) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(keyHandedOver.Bool(i.HandedOver))
	}
}

func (t *telemetry) releaseDone(ctx context.Context, i mongolock.ReleaseDoneInfo) {
	end(ctx, i.TraceResult, keyToken.Int64(i.FencingToken))
}

// acquired counts a handle made: acquired, and held.
func (t *telemetry) acquired(l mongolock.TraceLock) {
	ctx := context.Background()
	if t.acquisitions.Enabled(ctx) || t.held.Enabled(ctx) {
		m := t.measure(l)
		t.acquisitions.Add(ctx, 1, m)
		t.held.Add(ctx, 1, m)
	}
}

func (t *telemetry) unheld(l mongolock.TraceLock) {
	if ctx := context.Background(); t.held.Enabled(ctx) {
		t.held.Add(ctx, -1, t.measure(l))
	}
}

func (t *telemetry) lost(i mongolock.LossInfo) {
	if ctx := context.Background(); t.losses.Enabled(ctx) {
		t.losses.Add(ctx, 1, t.measure(i.Lock, keyReason.String(i.Reason)))
	}
}

func (t *telemetry) extendStart(ctx context.Context, i mongolock.ExtendStartInfo) context.Context {
	ctx, span := t.tracer.Start(ctx, spanPrefix+"extend")
	if span.IsRecording() {
		span.SetAttributes(append(dbAttrs(nil, i.Database, i.Collection), keyHandles.Int(i.Handles))...)
	}
	return ctx
}

func (t *telemetry) extendDone(ctx context.Context, i mongolock.ExtendDoneInfo) {
	end(ctx, i.TraceResult, keyMatched.Int(i.Matched), keyLost.Int(i.Lost))
	if t.extensions.Enabled(ctx) {
		t.extensions.Record(ctx, i.Took.Seconds(), metric.WithAttributes(
			append(dbAttrs(nil, i.Database, i.Collection), keyOutcome.String(i.Outcome))...))
	}
}

func (t *telemetry) orphanReleased(l mongolock.TraceLock) {
	if ctx := context.Background(); t.orphans.Enabled(ctx) {
		t.orphans.Add(ctx, 1, t.measure(l))
	}
}

// fleetAttrs are the attributes of a fleet's shard (names: with the
// fleet's name), then extra.
func fleetAttrs(i mongolock.ShardInfo, names bool, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := dbAttrs(make([]attribute.KeyValue, 0, 5+len(extra)), i.Database, i.Collection)
	if names {
		kv = append(kv, keyFleet.String(i.Fleet))
	}
	return metric.WithAttributes(append(kv, extra...)...)
}

func (t *telemetry) shardStarted(i mongolock.ShardInfo) {
	if ctx := context.Background(); t.shards.Enabled(ctx) {
		t.shards.Add(ctx, 1, fleetAttrs(i, t.metricNames))
	}
}

// shardStopped counts a shard down, and its stop by reason, with a moved
// or left one's drain.
func (t *telemetry) shardStopped(i mongolock.ShardInfo) {
	ctx := context.Background()
	if t.shards.Enabled(ctx) {
		t.shards.Add(ctx, -1, fleetAttrs(i, t.metricNames))
	}
	if t.stops.Enabled(ctx) {
		t.stops.Add(ctx, 1, fleetAttrs(i, t.metricNames, keyStop.String(i.Reason)))
	}
	if (i.Reason == "moved" || i.Reason == "left") && t.drains.Enabled(ctx) {
		t.drains.Record(ctx, i.Drained.Seconds(), fleetAttrs(i, t.metricNames, keyStop.String(i.Reason)))
	}
}
