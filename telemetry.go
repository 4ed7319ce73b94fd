package mongolock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry: OpenTelemetry spans and metrics, and log records.
//
// Every span, instrument, attribute and log message is made here, by hooks
// that the operations call. With no SDK installed, a hook costs a span
// context and an Enabled check: attributes are built only for a span that
// records or an instrument that is enabled.

// instrumentation names the library's tracer and meter.
const instrumentation = "github.com/mongolock/mongolock"

// Span names; an acquisition's, less the prefix, is its mongolock.operation.
const (
	spanPrefix     = "mongolock."
	spanAcquire    = spanPrefix + "acquire"
	spanTryAcquire = spanPrefix + "try_acquire"
	spanRelease    = spanPrefix + "release"
	spanProclaim   = spanPrefix + "proclaim"
	spanExtend     = spanPrefix + "extend"
)

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
)

// lossReason says why a handle was lost: the value of mongolock.loss.reason.
type lossReason string

const (
	lossExpired      lossReason = "expired"       // the lease ran out before an extension succeeded
	lossTakenOver    lossReason = "taken_over"    // someone else holds the lock, or its document was deleted
	lossClientClosed lossReason = "client_closed" // the handle's client was disconnected
)

// telemetryConfig is what the options set.
type telemetryConfig struct {
	tracers                trace.TracerProvider
	meters                 metric.MeterProvider
	logger                 *slog.Logger
	spanNames, metricNames bool
}

func defaultTelemetryConfig() telemetryConfig {
	return telemetryConfig{tracers: otel.GetTracerProvider(), meters: otel.GetMeterProvider(),
		logger: slog.New(slog.DiscardHandler), spanNames: true}
}

func (c telemetryConfig) check() error {
	switch {
	case c.tracers == nil:
		return invalid("WithTracerProvider(nil): pass a provider, or leave the option out for the global one")
	case c.meters == nil:
		return invalid("WithMeterProvider(nil): pass a provider, or leave the option out for the global one")
	case c.logger == nil:
		return invalid("WithLogger(nil): pass a logger, or leave the option out to log nothing")
	}
	return nil
}

// WithTracerProvider sets where the spans of the provider's operations go.
// Default: the global provider, otel.GetTracerProvider(), which forwards to
// the one installed with otel.SetTracerProvider, also later. A nil provider
// is an error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *config) { o.tracers = tp }
}

// WithMeterProvider sets where the provider's metrics go. Default: the
// global provider, otel.GetMeterProvider(), which forwards to the one
// installed with otel.SetMeterProvider, also later. A nil provider is an
// error.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *config) { o.meters = mp }
}

// WithLogger sets where the provider logs: losses and handles dropped while
// held (Warn), acquisitions released in the background because nobody got
// their handle, and failures to create the TTL index (Info), and transient
// errors that are retried (Debug). Default: it logs nothing. A nil logger is
// an error.
func WithLogger(l *slog.Logger) Option {
	return func(o *config) { o.logger = l }
}

// WithNamesInSpans sets whether spans carry the lock's name (attribute
// mongolock.lock.name, shortened past 64 bytes as Error.Name is). Default
// true; turn it off when names are secret or personal.
func WithNamesInSpans(on bool) Option {
	return func(o *config) { o.spanNames = on }
}

// WithNamesInMetrics sets whether metrics carry the lock's name (attribute
// mongolock.lock.name), which makes a series per name: only for a small,
// fixed set of names. Default false.
func WithNamesInMetrics(on bool) Option {
	return func(o *config) { o.metricNames = on }
}

// telemetry is a provider's tracer, instruments and logger.
type telemetry struct {
	tracer                 trace.Tracer
	log                    *slog.Logger
	db                     string
	spanNames, metricNames bool

	waited       metric.Float64Histogram // acquisition call time
	attempts     metric.Int64Histogram   // attempts per acquisition call
	acquisitions metric.Int64Counter     // handles made
	losses       metric.Int64Counter     // handles lost
	held         metric.Int64UpDownCounter
	extensions   metric.Float64Histogram // extension round trips
	orphans      metric.Int64Counter     // acquisitions nobody got, released
}

func newTelemetry(c telemetryConfig, db string) telemetry {
	m := c.meters.Meter(instrumentation)
	secs := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	t := telemetry{tracer: c.tracers.Tracer(instrumentation), log: c.logger, db: db, spanNames: c.spanNames, metricNames: c.metricNames}
	var errs [7]error
	t.waited, errs[0] = m.Float64Histogram("mongolock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an Acquire or TryAcquire call to its return, by outcome."),
		metric.WithExplicitBucketBoundaries(secs...))
	t.attempts, errs[1] = m.Int64Histogram("mongolock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquisition attempts (round trips) per Acquire or TryAcquire call."),
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
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
	}
	return t
}

// lockAttrs are the attributes of l's spans (names: with its name), then
// extra.
func (t *telemetry) lockAttrs(l *Lock, names bool, extra ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 7+len(extra))
	kv = append(t.dbAttrs(kv, l.space().coll.Name()), l.kind.attrs()...)
	if names {
		kv = append(kv, keyName.String(shortName(l.name)))
	}
	return append(kv, extra...)
}

// dbAttrs appends the semantic conventions' attributes of coll to kv.
func (t *telemetry) dbAttrs(kv []attribute.KeyValue, coll string) []attribute.KeyValue {
	return append(kv, keySystem.String("mongodb"), keyNamespace.String(t.db), keyCollection.String(coll))
}

// measure returns the attributes of a measurement of l, then extra.
func (t *telemetry) measure(l *Lock, extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(t.lockAttrs(l, t.metricNames, extra...)...)
}

// start starts the span called name of a call on l, a child of ctx's span.
func (t *telemetry) start(ctx context.Context, name string, l *Lock) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(t.lockAttrs(l, t.spanNames)...)
	}
	return ctx, span
}

// outcome names how a call ended: ok, "lost" (ErrLockLost), "not_acquired"
// (ErrNotAcquired), or "error".
func outcome(err error, ok string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrLockLost):
		return "lost"
	case errors.Is(err, ErrNotAcquired):
		return "not_acquired"
	}
	return "error"
}

// errorType is the value of error.type for err: a few classes, for low
// cardinality.
func errorType(err error) string {
	switch {
	case errors.Is(err, ErrLockLost):
		return "lock_lost"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case isClosed(err):
		return "client_closed"
	case isTransient(err):
		return "transient"
	}
	return "_OTHER"
}

// end ends span with outcome out, marking it failed if out is "error".
// Its status says err without the lock's name: names may be off.
func end(span trace.Span, out string, err error, kv ...attribute.KeyValue) {
	if span.IsRecording() {
		kv = append(kv, keyOutcome.String(out))
		if out == "error" {
			kv = append(kv, keyErrorType.String(errorType(err)))
			var e *Error
			if errors.As(err, &e) {
				err = e.Err
			}
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(kv...)
	}
	span.End()
}

// acquireCall traces and measures one Acquire or TryAcquire call.
type acquireCall struct {
	t          *telemetry
	l          *Lock
	name       string // spanAcquire or spanTryAcquire
	span       trace.Span
	start      time.Time
	attempts   int
	handedOver bool // the handle was handed over by a release of this process
}

// traceAcquire runs acquire, the body of l's Acquire or TryAcquire (name,
// its span), in its span, and measures the call.
func (t *telemetry) traceAcquire(ctx context.Context, l *Lock, name string,
	acquire func(context.Context, *acquireCall) (*Handle, error)) (h *Handle, err error) {
	ctx, span := t.start(ctx, name, l)
	call := acquireCall{t: t, l: l, name: name, span: span, start: time.Now()}
	defer func() { call.end(ctx, h, err) }()
	return acquire(ctx, &call)
}

// attempted counts an attempt that returned err. A refused or failed one
// is an event of the span, and a transient error is logged (Debug).
func (c *acquireCall) attempted(ctx context.Context, err error) {
	c.attempts++
	if err == nil {
		return
	}
	if c.span.IsRecording() {
		kv := []attribute.KeyValue{keyOutcome.String(outcome(err, "")), keyAttempts.Int(c.attempts)}
		if !errors.Is(err, ErrNotAcquired) {
			kv = append(kv, keyErrorType.String(errorType(err)))
		}
		c.span.AddEvent("mongolock.attempt", trace.WithAttributes(kv...))
	}
	if c.t.log.Enabled(ctx, slog.LevelDebug) && isTransient(err) {
		c.t.log.DebugContext(ctx, "mongolock: acquisition attempt failed; retrying", "lock", shortName(c.l.name), "error", err)
	}
}

// end ends the call, which returned h or err.
func (c *acquireCall) end(ctx context.Context, h *Handle, err error) {
	waited, out := time.Since(c.start), outcome(err, "acquired")
	if c.span.IsRecording() {
		kv := []attribute.KeyValue{keyAttempts.Int(c.attempts), keyWaited.Float64(waited.Seconds())}
		if h != nil {
			kv = append(kv, keyToken.Int64(h.token.Load()), keyHandedOver.Bool(c.handedOver))
		}
		end(c.span, out, err, kv...)
	} else {
		c.span.End()
	}
	t := c.t
	if t.waited.Enabled(ctx) || t.attempts.Enabled(ctx) {
		m := t.measure(c.l, keyOperation.String(c.name[len(spanPrefix):]), keyOutcome.String(out))
		t.waited.Record(ctx, waited.Seconds(), m)
		t.attempts.Record(ctx, int64(c.attempts), m)
	}
}

// handedOver records on ctx's span (a Release's) whether it handed the
// lock over to a waiter of this process.
func handedOver(ctx context.Context, ok bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(keyHandedOver.Bool(ok))
	}
}

// endRelease ends the span of h's Release (or Proclaim: ok names its
// success), which returned err.
func (t *telemetry) endRelease(span trace.Span, h *acquisition, ok string, err error) {
	end(span, outcome(err, ok), err, keyToken.Int64(h.token.Load()))
}

// acquired counts a handle of l made: acquired, and held.
func (t *telemetry) acquired(l *Lock) {
	ctx := context.Background()
	if t.acquisitions.Enabled(ctx) || t.held.Enabled(ctx) {
		m := t.measure(l)
		t.acquisitions.Add(ctx, 1, m)
		t.held.Add(ctx, 1, m)
	}
}

// unheld counts a handle of l that no longer holds.
func (t *telemetry) unheld(l *Lock) {
	if ctx := context.Background(); t.held.Enabled(ctx) {
		t.held.Add(ctx, -1, t.measure(l))
	}
}

// countLoss counts the loss of h, for reason.
func (t *telemetry) countLoss(h *acquisition, reason lossReason) {
	if ctx := context.Background(); t.losses.Enabled(ctx) {
		t.losses.Add(ctx, 1, t.measure(h.lock, keyReason.String(string(reason))))
	}
}

// logLoss logs (Warn) the loss of h, for reason (why).
func (t *telemetry) logLoss(h *acquisition, reason lossReason, why error) {
	t.log.Warn("mongolock: lock lost", "lock", shortName(h.lock.name), "fencingToken", h.token.Load(), "reason", string(reason), "error", why)
}

// startExtension starts the span of one extension round trip of hs, all
// of one collection.
func (t *telemetry) startExtension(ctx context.Context, hs []*acquisition) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, spanExtend)
	if span.IsRecording() {
		span.SetAttributes(append(t.dbAttrs(nil, hs[0].lock.space().coll.Name()), keyHandles.Int(len(hs)))...)
	}
	return ctx, span
}

// endExtension ends the extension of hs sent at sent, which did not match
// lost, or failed with err. A transient error, retried, is logged (Debug).
func (t *telemetry) endExtension(ctx context.Context, span trace.Span, hs, lost []*acquisition, err error, sent time.Time) {
	took := time.Since(sent)
	if span.IsRecording() {
		matched, nlost := len(hs)-len(lost), len(lost)
		if err != nil {
			matched = 0
		}
		if isClosed(err) {
			nlost = len(hs)
		}
		end(span, outcome(err, "extended"), err, keyMatched.Int(matched), keyLost.Int(nlost))
	} else {
		span.End()
	}
	if t.extensions.Enabled(ctx) {
		t.extensions.Record(ctx, took.Seconds(), metric.WithAttributes(
			append(t.dbAttrs(nil, hs[0].lock.space().coll.Name()), keyOutcome.String(outcome(err, "extended")))...))
	}
	if err != nil && t.log.Enabled(ctx, slog.LevelDebug) && isTransient(err) {
		t.log.DebugContext(ctx, "mongolock: extension failed; retrying", "handles", len(hs), "error", err)
	}
}

// orphanReleased counts and logs (Info) the release of an acquisition of l
// that nobody got a handle for.
func (t *telemetry) orphanReleased(l *Lock) {
	ctx := context.Background()
	if t.orphans.Enabled(ctx) {
		t.orphans.Add(ctx, 1, t.measure(l))
	}
	t.log.Info("mongolock: released an acquisition nobody got a handle for", "lock", shortName(l.name))
}

// retrying logs (Debug) a background release of l that failed with err and
// is tried again.
func (t *telemetry) retrying(l *Lock, err error) {
	t.log.Debug("mongolock: background release failed; retrying", "lock", shortName(l.name), "error", err)
}

// abandoned logs (Warn) that h's Handle became unreachable while it held
// its lock.
func (t *telemetry) abandoned(h *acquisition) {
	t.log.Warn("mongolock: a Handle became unreachable while holding its lock; releasing it (call Release when done)",
		"lock", shortName(h.lock.name), "fencingToken", h.token.Load())
}

// indexFailed logs (Info) err, if not nil, of creating or raising the TTL
// index of coll.
func (t *telemetry) indexFailed(coll string, err error) {
	if err != nil {
		t.log.Info("mongolock: could not create the TTL index; idle lock documents stay in the collection",
			"collection", coll, "index", TTLIndexName, "error", err)
	}
}
