package mongolock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Leader election.
//
// An election is a lock held with a value: to campaign is to Acquire the
// lock of the election's name, to lead is to hold it, to resign is to
// Release it. So an election has the lock's guarantees: at most one leader
// at a time by the server's clock, fencing tokens that increase from leader
// to leader, loss signalled before anyone else can lead, a crashed leader
// replaced once its lease expires, and a resignation handed over at once
// to a campaign of the same process.

// MaxValueLen bounds an election's value, in bytes.
const MaxValueLen = 16 << 10

// errResigned reports a proclamation after the leadership's Release: an
// ErrReleased, in an election's words.
var errResigned = fmt.Errorf("%w: the leadership was resigned", ErrReleased)

// An Election elects one leader at a time among those that campaign on its
// name, in this process and in others. It is safe for concurrent use.
//
// It is the lock of that name: a campaign contends with Acquire calls of
// the lock, and Inspect shows the leader as the holder.
type Election struct {
	lock *Lock // without a value: campaigns make their own
}

// Election returns the election called name; names are used as Lock's are.
func (p *Provider) Election(name string) *Election { return &Election{p.Lock(name)} }

// Name returns the election's name, exactly as given.
func (e *Election) Name() string { return e.lock.name }

// A Leadership is a campaign that won: the Handle of the election's lock,
// and Proclaim. Release resigns.
//
// On Release, others can lead at once, and a campaign of this process that
// waits for the election leads from the same round trip on.
//
// Its FencingToken, Context and Lost are the Handle's: Context ends (cause
// ErrLockLost) and Lost closes when leadership is lost, before anyone else
// can lead.
type Leadership struct {
	*Handle
}

// Leader is who leads an election, as the server saw it.
type Leader struct {
	// Value is what the leader campaigned with, or last proclaimed.
	Value string
	// Owner is the leader's (WithOwner); "" for a holder of the lock that is
	// not a mongolock acquisition.
	Owner string
	// FencingToken is the leadership's: greater for each new leader.
	FencingToken int64
	// Since is when it was elected, in server time.
	Since time.Time
}

// Campaign waits until the caller leads the election with value, or ctx
// ends. It returns the Leadership, or an error satisfying errors.Is(err,
// ctx.Err()) if ctx ended first, or ErrClosed after the provider's Close.
//
// It is Acquire of the election's lock: campaigns of one process wait in
// line, first come first served; campaigns of different processes take
// turns, as Acquire calls do, but a turn is one term: a process whose leader
// resigned campaigns again behind a campaign that waits in another process.
// Transient errors are retried.
//
// On success, the caller leads until it releases the Leadership, or
// leadership is lost. When ctx ends first, the error satisfies
// errors.Is(err, ctx.Err()), and also errors.Is(err, ErrNotAcquired) if
// someone else led the whole time. After the provider's Close, it returns
// ErrClosed. A value longer than MaxValueLen, or an error that retrying
// cannot fix, is returned at once.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	l := &Lock{p: e.lock.p, name: e.lock.name, kind: electionDriver{value: value}}
	if err := checkValue(value); err != nil {
		return nil, l.errorf("campaign", err)
	}
	h, err := l.Acquire(ctx)
	if err != nil {
		return nil, renamed("campaign", err)
	}
	return &Leadership{h}, nil
}

// Proclaim replaces the leader's value, in one owner-checked round trip
// bounded by ctx. If leadership was lost, it writes nothing and returns an
// error wrapping ErrLockLost.
//
// A loss counts even if not noticed yet (someone else leads, or the
// election's document was deleted); Proclaim then also signals it (Lost,
// Context). A leadership known lost, or whose lease's local
// deadline has passed, sends nothing. After Release it returns an error
// wrapping ErrReleased, with a value longer than MaxValueLen one wrapping
// ErrInvalidArgument, and sends nothing. A failed
// round trip returns its error: the value may or may not have been
// written.
func (l *Leadership) Proclaim(ctx context.Context, value string) (err error) {
	h := l.handle().held()
	if h == nil {
		return &Error{Op: "proclaim", Err: errNilHandle}
	}
	fail := func(err error) error { return h.lock.errorf("proclaim", err) }
	switch {
	case ctx == nil:
		return fail(errNilContext)
	case h.released.Load():
		return fail(errResigned)
	}
	ctx = h.lock.p.tel.startHolderWrite(ctx, h, opProclaimTrace)
	defer func() { h.lock.p.tel.endHolderWrite(ctx, h, opProclaimTrace, "proclaimed", err) }()
	if err := cmp.Or(checkValue(value), h.knownLost()); err != nil {
		return fail(err)
	}
	matched, _, err := h.lock.p.locks.store.updateOne(ctx, ownerFilter(h.lock.name, h.lockID), proclaimUpdate(value))
	if err != nil {
		return fail(err)
	}
	if matched == 0 {
		lost := fmt.Errorf("%w: at proclaim, someone else led, or the election's document was gone", ErrLockLost)
		h.loseUnmatched(ctx, lost)
		return fail(cmp.Or(h.lossError(), lost))
	}
	return nil
}

// Leader returns who leads the election, judged by the server's clock, in
// one round trip bounded by ctx. If nobody leads, the error wraps
// ErrNoLeader; otherwise an error is the round trip's.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, _, err := e.read(ctx)
	switch {
	case err != nil:
		return Leader{}, renamed("leader", err)
	case l == (Leader{}):
		return Leader{}, e.lock.errorf("leader", ErrNoLeader)
	}
	return l, nil
}

// read returns the leader, or the zero Leader if nobody leads, and how long
// its lease has left by the server's clock.
func (e *Election) read(ctx context.Context) (Leader, time.Duration, error) {
	info, err := e.lock.p.inspectLock(ctx, e.lock.name)
	switch {
	case errors.Is(err, ErrNoLock):
		return Leader{}, 0, nil
	case err != nil || !info.Held:
		return Leader{}, 0, err
	}
	return Leader{Value: info.Value, Owner: info.Owner, FencingToken: info.FencingToken, Since: info.AcquiredAt},
		info.ExpiresAt.Sub(info.ServerTime), nil
}

// Observe returns a channel that delivers who leads the election: the
// current state at once, then each change of leader or of its value. The
// zero Leader says that nobody leads.
//
// It reads the election every longest busy-wait sleep and when the leader's
// lease ends; where the server has change streams, it sees changes at once
// and reads every standby sleep. A receiver that falls behind gets the
// latest state, not a backlog (a leader that led for less than one read may
// go unseen). Failed reads are retried. The channel is closed, and nothing
// of Observe keeps running, once ctx ends, the provider is closed, or its
// client is disconnected. A nil ctx, or an election whose name is not
// valid UTF-8, gets a closed channel.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	p := e.lock.p
	if ctx == nil || checkName(e.lock.name) != nil || !p.enter() {
		close(out)
		return out
	}
	go func() {
		defer p.calls.Done()
		defer close(out)
		e.observe(ctx, out)
	}()
	return out
}

// observe reads the election whenever it may have changed, and offers out
// the latest state until it is taken.
func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	p := e.lock.p
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	changed := make(chan struct{}, 1)
	var streaming atomic.Bool
	wg.Go(func() { e.watch(ctx, changed, &streaming) })

	var latest Leader
	pending, first := false, true
	nextRead := time.NewTimer(0)
	defer nextRead.Stop()
	for {
		var send chan<- Leader // nil: nothing to offer
		if pending {
			send = out
		}
		select {
		case send <- latest:
			pending = false
			continue
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-changed:
		case <-nextRead.C:
		}
		l, left, err := e.read(ctx)
		switch {
		case isClosed(err):
			return
		case err == nil && (first || l.FencingToken != latest.FencingToken || l.Value != latest.Value):
			latest, pending, first = l, true, false
		}
		nextRead.Reset(p.opts.observeAgainIn(streaming.Load(), err == nil && l != (Leader{}), left))
	}
}

// watch signals changed on each change of the election's document, while
// a change stream runs (streaming), and once more as each stream ends.
func (e *Election) watch(ctx context.Context, changed chan<- struct{}, streaming *atomic.Bool) {
	keepWatching(ctx, e.lock.p.locks.store, leaderEvents(e.lock.name), func() {
		streaming.Store(true)
		signalTo(changed) // a change before the stream opened is read now
	}, func(string) { signalTo(changed) }, func() {
		if streaming.Swap(false) {
			signalTo(changed) // read now, and poll at the shorter period from then on
		}
	})
}

// Run campaigns with value, runs fn while it leads, and resigns and
// campaigns again when fn returns, until ctx ends. It returns only with an
// error: when ctx ends, after Close, or one that campaigning cannot fix.
//
// It resigns also if fn panics, and the panic goes on. fn's ctx ends when
// ctx ends, or when leadership is lost, before anyone else can lead (its
// cause is then ErrLockLost); fn should return then. A loss is not an
// error: Run campaigns again. A fn that returns at once lets a campaign
// waiting in another process lead next.
//
// Run returns when ctx ends, with an error satisfying errors.Is(err,
// ctx.Err()), and after Close (which ends fn's ctx) with ErrClosed. An
// error that campaigning again cannot fix (a value longer than
// MaxValueLen, a missing permission), a nil ctx or a nil fn is returned at
// once. To follow who leads as well, range over Observe in a goroutine.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, l *Leadership)) error {
	switch {
	case ctx == nil:
		return e.lock.errorf("run", errNilContext)
	case fn == nil:
		return e.lock.errorf("run", errNilFunction)
	}
	for {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			return renamed("run", err)
		}
		// Its error is a loss, or a failed resignation that goes on in the
		// background: either way, campaign again.
		_ = do(ctx, l, func(ctx context.Context) error { fn(ctx, l); return nil })
	}
}

func checkValue(value string) error {
	switch {
	case len(value) > MaxValueLen:
		return invalidf("a value of %d bytes: at most MaxValueLen (%d) are allowed", len(value), MaxValueLen)
	case !utf8.ValidString(value):
		return invalid("a value that is not valid UTF-8, as BSON's strings must be")
	}
	return nil
}

// electionDriver is an election's kind: a lock's, held by a campaign with
// its value, in terms.
type electionDriver struct {
	lockDriver
	value string
}

func (d electionDriver) acquire(ctx context.Context, p *Provider, name string, a attempt) (reply, error) {
	return acquireMutex(ctx, p, name, a, &d.value, p.campaign[a.mode], electionTurn)
}

func (electionDriver) describe() kindInfo { return kindInfo{kind: KindElection} }

// holds: a leader that resigns steps aside at once, and one that leads is
// not bounded.
func (electionDriver) holdsApply() bool { return false }

// A Leadership's methods of its Handle, each the Handle's, so that a nil
// *Leadership (a failed Campaign's) answers as a nil Handle does rather
// than panic: Release returns nil, Context is done, Lost closed, the
// accessors zero values.

// handle returns l's Handle, nil for a nil Leadership.
func (l *Leadership) handle() *Handle {
	if l == nil {
		return nil
	}
	return l.Handle
}

// Name is the Handle's: the election's name.
func (l *Leadership) Name() string { return l.handle().Name() }

// FencingToken is the Handle's: greater for each new leader.
func (l *Leadership) FencingToken() int64 { return l.handle().FencingToken() }

// AcquiredAt is the Handle's: when the leadership began, by the server's
// clock.
func (l *Leadership) AcquiredAt() time.Time { return l.handle().AcquiredAt() }

// Owner is the Handle's.
func (l *Leadership) Owner() string { return l.handle().Owner() }

// LeaseEnd is the Handle's.
func (l *Leadership) LeaseEnd() time.Time { return l.handle().LeaseEnd() }

// Context is the Handle's: done when leadership is lost (cause
// ErrLockLost) or given up.
func (l *Leadership) Context() context.Context { return l.handle().Context() }

// Lost is the Handle's: closed when leadership is lost, before anyone else
// can lead.
func (l *Leadership) Lost() <-chan struct{} { return l.handle().Lost() }

// Release is the Handle's: it gives leadership up.
func (l *Leadership) Release(ctx context.Context) error { return l.handle().Release(ctx) }

// Ticket is the Handle's: a ticket of the leadership, for
// Election.TakeOver.
func (l *Leadership) Ticket() (string, error) { return l.handle().Ticket() }
