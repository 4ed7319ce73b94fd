package mongolock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Telemetry: the hooks of WithTrace, and log records.
//
// The operations call the methods below; each does nothing unless a Trace
// with the hook in question, or a logger that wants the record, was given.
// Info structs are built only for a hook that is set.

// Trace is a set of hooks that the provider calls on its operations'
// events (WithTrace), as net/http/httptrace.ClientTrace does for HTTP
// requests. Every field is optional: a nil hook is not called.
//
// It is the way to add tracing and metrics without the library depending
// on a telemetry SDK: the module github.com/mongolock/mongolock/otelmongolock
// makes OpenTelemetry spans and metrics with it. A provider without
// WithTrace does no telemetry work. Hooks are called synchronously, from
// the goroutine of the operation or of the background work (extensions,
// losses, background releases), and may run concurrently with each other:
// they must be quick and safe for concurrent use. A provider of
// mongolocktest calls them as one over a database does. Fields may be
// added later; set them by name.
type Trace struct {
	// AcquireStart is called when an acquisition call begins. The context
	// it returns is the call's from then on: its round trips are sent with
	// it, and AcquireAttempt and AcquireDone get it. Nil: ctx stays.
	//
	// The calls are Acquire and TryAcquire on the server (or Campaign, of
	// kind "election"), and TakeOver (Provider's or Election's, whose one
	// round trip is its attempt).
	AcquireStart func(ctx context.Context, info AcquireStartInfo) context.Context
	// AcquireAttempt is called after each acquisition round trip of the
	// call, with its error (nil: it acquired).
	AcquireAttempt func(ctx context.Context, info AttemptInfo)
	// AcquireDone is called when the call returns.
	AcquireDone func(ctx context.Context, info AcquireDoneInfo)
	// Waiting is called twice per waiting call, joining first: when an
	// Acquire call (or Campaign, or an RWLock handle's Upgrade) joins its
	// process's line for its lock, and again when it leaves.
	//
	// It leaves when it acquired, was handed the lock, gave up (its ctx
	// ended), failed, or its provider closed. An Acquire's calls come
	// between its AcquireStart and AcquireDone; an Upgrade's carry its
	// handle's mode, "upgradeable". TryAcquire waits in no line.
	Waiting func(info WaitingInfo)

	// ReleaseStart is called when a Release of a handle (a Leadership's
	// too) that has not been released yet begins, or a Proclaim. The context it
	// returns is the call's from then on, as AcquireStart's.
	ReleaseStart func(ctx context.Context, info ReleaseStartInfo) context.Context
	// HandOver is called when a Release has offered the lock to an Acquire
	// of this process in its round trip, with whether that Acquire got it.
	HandOver func(ctx context.Context, info HandOverInfo)
	// ReleaseDone is called when the Release or Proclaim returns.
	ReleaseDone func(ctx context.Context, info ReleaseDoneInfo)

	// Acquired is called when a handle is made (by an acquisition or a
	// hand-over): it holds its lock or slot from then on.
	Acquired func(info TraceLock)
	// Unheld is called once per handle when it no longer holds: released
	// or lost.
	Unheld func(info TraceLock)
	// Lost is called once per handle lost while held, before its Lost
	// channel closes.
	Lost func(info LossInfo)

	// ExtendStart is called when one round trip that extends the leases of
	// a batch of handles, all of one collection, begins. The context it
	// returns is the round trip's, as AcquireStart's.
	ExtendStart func(ctx context.Context, info ExtendStartInfo) context.Context
	// ExtendDone is called when that round trip has ended.
	ExtendDone func(ctx context.Context, info ExtendDoneInfo)

	// OrphanReleased is called when an acquisition nobody got a handle for
	// (its caller saw an error, or its Acquire ended as it was handed over)
	// has been released in the background.
	OrphanReleased func(info TraceLock)
	// Abandoned is called when a Handle became unreachable while it held
	// its lock; it is then released in the background.
	Abandoned func(info HandleInfo)
	// IndexFailed is called when the TTL index of a collection could not
	// be created or raised; locking goes on without it.
	IndexFailed func(info IndexInfo)

	// ShardStarted is called when a fleet's worker starts a shard's
	// function (Fleet.Run).
	ShardStarted func(info ShardInfo)
	// ShardStopped is called when that function has returned and the
	// shard was released, with why it stopped.
	ShardStopped func(info ShardInfo)
}

// TraceLock says which lock a Trace event is about.
type TraceLock struct {
	Name       string // the lock's name, shortened past 64 bytes as Error.Name is
	Kind       Kind   // which kind of lock it is
	Mode       string // an RWLock's: "read", "write" or "upgradeable"; "" for the other kinds
	Slots      int    // a Semaphore's number of slots; 0 for the other kinds
	Units      int    // the slots each acquisition of a Semaphore takes: k of Semaphore.Units(k), else 1; 0 for the other kinds
	Database   string // the database of its collection
	Collection string // its document's: WithCollection's, or "<collection>_semaphores" for a Semaphore or an RWLock
}

// TraceResult is how a call or round trip ended, as the hooks of Trace see it.
type TraceResult struct {
	Err error // the error it ended with; nil on success
	// Outcome names how it ended: on success the operation's word
	// ("acquired", "released", "proclaimed", "extended"), else "lost",
	// "not_acquired", "stale_ticket" or "error".
	//
	// "lost" is ErrLockLost, "not_acquired" ErrNotAcquired and
	// "stale_ticket" ErrStaleTicket (a take-over's).
	Outcome string
	// ErrorType classifies Err in few values, for low cardinality; "" if
	// Err is nil, ErrNotAcquired or ErrStaleTicket.
	//
	// The values: "lock_lost", "closed" (ErrClosed), "deadline_exceeded",
	// "canceled", "client_closed" (its client was disconnected),
	// "transient" (retried) or "_OTHER".
	ErrorType string
}

// AcquireStartInfo is about an acquisition call that begins.
type AcquireStartInfo struct {
	Lock      TraceLock // the lock it is about
	Operation string    // "acquire", "try_acquire" or "take_over"
}

// AttemptInfo is about one acquisition round trip.
type AttemptInfo struct {
	Lock      TraceLock // the lock it is about
	Operation string    // "acquire", "try_acquire" or "take_over"
	Attempt   int       // its number in the call, from 1
	TraceResult
}

// AcquireDoneInfo is about an acquisition call that returned.
type AcquireDoneInfo struct {
	Lock         TraceLock     // the lock it is about
	Operation    string        // "acquire", "try_acquire" or "take_over"
	Attempts     int           // acquisition round trips sent; 0 if it was handed over at once (or a take-over sent none)
	Waited       time.Duration // from the call to its return
	FencingToken int64         // the handle's; 0 if none
	HandedOver   bool          // it got a handle handed over by a Release of this process
	TraceResult
}

// WaitingInfo is about an acquisition call that joins or leaves its
// process's line for its lock.
type WaitingInfo struct {
	Lock TraceLock // the lock it is about
	// Waiting is true when the call joins the line, false when it leaves.
	Waiting bool
	// Count is how many calls of this process wait in the lock's line just
	// after this change: the head, which asks the database, and those
	// behind it; of every mode of an RWLock.
	//
	// Calls of different goroutines may be reported out of order: add +1
	// when Waiting, -1 when not, for a count that is exact once they are
	// all reported.
	Count int
}

// ReleaseStartInfo is about a release, or a Proclaim, that begins.
type ReleaseStartInfo struct {
	Lock         TraceLock // the lock it is about
	Operation    string    // "release" or "proclaim"
	FencingToken int64     // the handle's (of a Proclaim: its Leadership's)
}

// HandOverInfo is about a Release that offered its lock to an Acquire of
// this process.
type HandOverInfo struct {
	Lock       TraceLock // the lock it is about
	HandedOver bool      // the Acquire got the lock in the release's round trip
}

// ReleaseDoneInfo is about a release, or a Proclaim, that returned.
type ReleaseDoneInfo struct {
	Lock         TraceLock // the lock it is about
	Operation    string    // "release" or "proclaim"
	FencingToken int64     // the handle's (of a Proclaim: its Leadership's)
	TraceResult
}

// HandleInfo is about one handle.
type HandleInfo struct {
	Lock         TraceLock // the lock it is about
	FencingToken int64     // the handle's
}

// LossInfo is about a handle lost while held.
type LossInfo struct {
	Lock         TraceLock // the lock it is about
	FencingToken int64     // the lost handle's
	// Reason says why it was lost: "expired", "taken_over" or
	// "client_closed".
	//
	// "expired": the lease ran out before an extension succeeded.
	// "taken_over": someone else holds the lock, or took it over by its
	// ticket, or its document was deleted. "client_closed": the handle's
	// client was disconnected.
	Reason string
	Err    error // the loss as Handle.Context's cause says it
}

// ExtendStartInfo is about one extension round trip that begins.
type ExtendStartInfo struct {
	Database, Collection string // where the handles' documents are, as TraceLock's
	Handles              int    // the handles whose leases it extends
}

// ExtendDoneInfo is about one extension round trip that ended.
type ExtendDoneInfo struct {
	Database, Collection string        // where the handles' documents are, as TraceLock's
	Handles              int           // the handles whose leases it extends
	Matched              int           // the handles it extended
	Lost                 int           // the handles found lost
	Took                 time.Duration // the round trip's time
	TraceResult
}

// IndexInfo is about the TTL index of a collection.
type IndexInfo struct {
	Database, Collection string // the collection the index is on
	Index                string // TTLIndexName
	Err                  error  // why it could not be created or raised
}

// ShardInfo is about one shard of a fleet, as its worker runs it.
type ShardInfo struct {
	Fleet                string // the fleet's name, shortened past 64 bytes as Error.Name is
	Index                int    // the shard's number
	Database, Collection string // where its document is
	FencingToken         int64  // its acquisition's
	// Reason says why a stopped shard's function returned; "" when it
	// started.
	//
	// "moved": the balance moved it; "left": Run ended; "lost": its lease
	// was lost; "failed": it returned an error; "returned": it returned nil
	// of its own.
	Reason string
	// Drained is, of a moved or left shard, the time from its ctx's end to
	// its release, which its function's return began.
	Drained time.Duration
}

// then returns hooks that call t's, then u's; t may be nil.
func (t *Trace) then(u *Trace) *Trace {
	if t == nil {
		c := *u
		return &c
	}
	return &Trace{
		AcquireStart: chainStart(t.AcquireStart, u.AcquireStart), AcquireAttempt: chainCtx(t.AcquireAttempt, u.AcquireAttempt),
		AcquireDone: chainCtx(t.AcquireDone, u.AcquireDone), Waiting: chain(t.Waiting, u.Waiting),
		ReleaseStart: chainStart(t.ReleaseStart, u.ReleaseStart), HandOver: chainCtx(t.HandOver, u.HandOver),
		ReleaseDone: chainCtx(t.ReleaseDone, u.ReleaseDone),
		Acquired:    chain(t.Acquired, u.Acquired), Unheld: chain(t.Unheld, u.Unheld), Lost: chain(t.Lost, u.Lost),
		ExtendStart: chainStart(t.ExtendStart, u.ExtendStart), ExtendDone: chainCtx(t.ExtendDone, u.ExtendDone),
		OrphanReleased: chain(t.OrphanReleased, u.OrphanReleased), Abandoned: chain(t.Abandoned, u.Abandoned),
		IndexFailed:  chain(t.IndexFailed, u.IndexFailed),
		ShardStarted: chain(t.ShardStarted, u.ShardStarted), ShardStopped: chain(t.ShardStopped, u.ShardStopped),
	}
}

func chain[I any](f, g func(I)) func(I) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(i I) { f(i); g(i) }
}

func chainCtx[I any](f, g func(context.Context, I)) func(context.Context, I) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(ctx context.Context, i I) { f(ctx, i); g(ctx, i) }
}

func chainStart[I any](f, g func(context.Context, I) context.Context) func(context.Context, I) context.Context {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(ctx context.Context, i I) context.Context { return g(f(ctx, i), i) }
}

// lossReason says why a handle was lost: LossInfo.Reason.
type lossReason string

const (
	lossExpired      lossReason = "expired"
	lossTakenOver    lossReason = "taken_over"
	lossClientClosed lossReason = "client_closed"
)

// Operations, as the info structs name them.
const (
	opAcquireTrace    = "acquire"
	opTryAcquireTrace = "try_acquire"
	opTakeOverTrace   = "take_over"
	opReleaseTrace    = "release"
	opProclaimTrace   = "proclaim"
)

// telemetry is a provider's hooks and logger.
type telemetry struct {
	trace *Trace // never nil: without WithTrace, every hook is nil
	log   *slog.Logger
}

// result is how a call that returned err ended; ok names its success.
func result(err error, ok string) TraceResult {
	r := TraceResult{Err: err, Outcome: ok}
	switch {
	case err == nil:
	case errors.Is(err, ErrLockLost):
		r.Outcome, r.ErrorType = "lost", errorType(err)
	case errors.Is(err, ErrNotAcquired):
		r.Outcome = "not_acquired"
	case errors.Is(err, ErrStaleTicket):
		r.Outcome = "stale_ticket"
	default:
		r.Outcome, r.ErrorType = "error", errorType(err)
	}
	return r
}

// errorType is TraceResult.ErrorType of err.
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

// A reported is what the telemetry reports on: a Lock, which names and
// describes itself.
type reported interface {
	Name() string
	info() TraceLock
}

// acquireCall follows one Acquire, TryAcquire or TakeOver call for its hooks.
type acquireCall struct {
	t          *telemetry
	l          reported
	op         string // opAcquireTrace, opTryAcquireTrace or opTakeOverTrace
	start      time.Time
	attempts   int
	handedOver bool // the handle was handed over by a release of this process
}

// startAcquire tells the hooks that l's Acquire, TryAcquire or TakeOver
// (op) begins, and returns its context and the call that counts its
// attempts; the call ends with end.
func (t *telemetry) startAcquire(ctx context.Context, l reported, op string) (context.Context, acquireCall) {
	call := acquireCall{t: t, l: l, op: op}
	if t.trace.AcquireDone != nil {
		call.start = time.Now()
	}
	if hook := t.trace.AcquireStart; hook != nil {
		ctx = hook(ctx, AcquireStartInfo{Lock: l.info(), Operation: op})
	}
	return ctx, call
}

// attempted counts an attempt that returned err. A transient error is
// logged (Debug).
func (c *acquireCall) attempted(ctx context.Context, err error) {
	c.attempts++
	if hook := c.t.trace.AcquireAttempt; hook != nil {
		hook(ctx, AttemptInfo{Lock: c.l.info(), Operation: c.op, Attempt: c.attempts, TraceResult: result(err, "acquired")})
	}
	if err != nil && c.t.log.Enabled(ctx, slog.LevelDebug) && isTransient(err) {
		c.t.log.DebugContext(ctx, "mongolock: acquisition attempt failed; retrying", "lock", shortName(c.l.Name()), "error", err)
	}
}

// end tells the hooks that the call returned h or err.
func (c *acquireCall) end(ctx context.Context, h *Handle, err error) {
	if hook := c.t.trace.AcquireDone; hook != nil {
		info := AcquireDoneInfo{Lock: c.l.info(), Operation: c.op, Attempts: c.attempts, Waited: time.Since(c.start),
			HandedOver: c.handedOver, TraceResult: result(err, "acquired")}
		if h != nil {
			info.FencingToken = h.token.Load()
		}
		hook(ctx, info)
	}
}

// waiting tells the hooks that an acquisition call of l joined its line
// (joined) or left it, which n calls wait in now.
func (t *telemetry) waiting(l reported, joined bool, n int) {
	if hook := t.trace.Waiting; hook != nil {
		hook(WaitingInfo{Lock: l.info(), Waiting: joined, Count: n})
	}
}

// startHolderWrite tells the hooks that a write of h's holder, its Release
// or Proclaim (op), begins (ReleaseStart reports both), and returns its
// context.
func (t *telemetry) startHolderWrite(ctx context.Context, h *acquisition, op string) context.Context {
	if hook := t.trace.ReleaseStart; hook != nil {
		return hook(ctx, ReleaseStartInfo{Lock: h.lock.info(), Operation: op, FencingToken: h.token.Load()})
	}
	return ctx
}

// endHolderWrite tells the hooks (ReleaseDone) that h's Release or Proclaim
// (op; ok names its success) returned err.
func (t *telemetry) endHolderWrite(ctx context.Context, h *acquisition, op, ok string, err error) {
	if hook := t.trace.ReleaseDone; hook != nil {
		hook(ctx, ReleaseDoneInfo{Lock: h.lock.info(), Operation: op, FencingToken: h.token.Load(), TraceResult: result(err, ok)})
	}
}

// handOver tells the hooks that a Release of l offered it to an Acquire
// of this process, which got it if ok.
func (t *telemetry) handOver(ctx context.Context, l reported, ok bool) {
	if hook := t.trace.HandOver; hook != nil {
		hook(ctx, HandOverInfo{Lock: l.info(), HandedOver: ok})
	}
}

// acquired tells the hooks that a handle of l was made.
func (t *telemetry) acquired(l reported) { lockEvent(t.trace.Acquired, l) }

// unheld tells the hooks that a handle of l no longer holds.
func (t *telemetry) unheld(l reported) { lockEvent(t.trace.Unheld, l) }

// lockEvent calls hook, if set, with l's TraceLock.
func lockEvent(hook func(TraceLock), l reported) {
	if hook != nil {
		hook(l.info())
	}
}

// countLoss tells the hooks about the loss of h, for reason (why).
func (t *telemetry) countLoss(h *acquisition, reason lossReason, why error) {
	if hook := t.trace.Lost; hook != nil {
		hook(LossInfo{Lock: h.lock.info(), FencingToken: h.token.Load(), Reason: string(reason), Err: why})
	}
}

// logLoss logs (Warn) the loss of h, for reason (why).
func (t *telemetry) logLoss(h *acquisition, reason lossReason, why error) {
	t.log.Warn("mongolock: lock lost", "lock", shortName(h.lock.name), "fencingToken", h.token.Load(), "reason", string(reason), "error", why)
}

// startExtension tells the hooks that one extension round trip of hs, all
// of one collection, begins, and returns its context.
func (t *telemetry) startExtension(ctx context.Context, hs []*acquisition) context.Context {
	if hook := t.trace.ExtendStart; hook != nil {
		sp := hs[0].lock.collection()
		return hook(ctx, ExtendStartInfo{Database: sp.db, Collection: sp.name, Handles: len(hs)})
	}
	return ctx
}

// endExtension tells the hooks that the extension of hs sent at sent did
// not match lost, or failed with err. A transient error, retried, is
// logged (Debug).
func (t *telemetry) endExtension(ctx context.Context, hs, lost []*acquisition, err error, sent time.Time) {
	if hook := t.trace.ExtendDone; hook != nil {
		sp := hs[0].lock.collection()
		info := ExtendDoneInfo{Database: sp.db, Collection: sp.name, Handles: len(hs),
			Matched: len(hs) - len(lost), Lost: len(lost), Took: time.Since(sent), TraceResult: result(err, "extended")}
		if err != nil {
			info.Matched = 0
		}
		if isClosed(err) {
			info.Lost = len(hs)
		}
		hook(ctx, info)
	}
	if err != nil && t.log.Enabled(ctx, slog.LevelDebug) && isTransient(err) {
		t.log.DebugContext(ctx, "mongolock: extension failed; retrying", "handles", len(hs), "error", err)
	}
}

// orphanReleased tells the hooks, and logs (Info), that an acquisition of
// l that nobody got a handle for was released.
func (t *telemetry) orphanReleased(l reported) {
	lockEvent(t.trace.OrphanReleased, l)
	t.log.Info("mongolock: released an acquisition nobody got a handle for", "lock", shortName(l.Name()))
}

// retrying logs (Debug) a background release of l that failed with err and
// is tried again.
func (t *telemetry) retrying(l reported, err error) {
	t.log.Debug("mongolock: background release failed; retrying", "lock", shortName(l.Name()), "error", err)
}

// abandoned tells the hooks, and logs (Warn), that h's Handle became
// unreachable while it held its lock.
func (t *telemetry) abandoned(h *acquisition) {
	if hook := t.trace.Abandoned; hook != nil {
		hook(HandleInfo{Lock: h.lock.info(), FencingToken: h.token.Load()})
	}
	t.log.Warn("mongolock: a Handle became unreachable while holding its lock; releasing it (call Release when done)",
		"lock", shortName(h.lock.name), "fencingToken", h.token.Load())
}

// telemetryConfig is what WithTrace and WithLogger set.
type telemetryConfig struct {
	trace    *Trace
	nilTrace bool
	logger   *slog.Logger
}
