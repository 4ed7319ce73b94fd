package mongolock

import (
	"cmp"
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A Provider mints named locks that share options and a collection. It is
// safe for concurrent use and cheap to keep for the life of a process;
// inject it where code needs locks.
//
// Providers of one client, database and collection are one process to the
// lock documents, however many there are: what the library keeps per
// collection, it keeps once per client for them all, while the client is
// reachable. They share an id in lock documents (ClaimInfo's Process, the
// process of the turn rule); one line of waiters per name, so that their
// Acquire calls wait first come first served, a release by one hands the
// lock over to a waiter of another, and a handle of one keeps the others'
// waiters from polling; one stream of release events; one check of the
// collection's default collation; and one creation of its TTL index. Each
// keeps its own options, leases and Close. Providers of different clients
// are different processes, also in one program, and take turns as processes
// do; so are the Providers of package mongolocktest, each a process of its own.
type Provider struct {
	locks lockCollection // the locks' and elections' collection
	slots lockCollection // the semaphores' and RWLocks': <collection>_semaphores
	opts  config

	// The statements of this provider that do not change per attempt:
	// the constant parts of a lock's and of a campaign's acquisition
	// pipeline by mode.
	acquire  [attemptModes]acquireParts
	campaign [attemptModes]acquireParts

	leases leases // the leases of its handles
	tel    telemetry

	senders chan func() // hands a round trip to an idle sender; unbuffered

	mu       sync.Mutex
	closed   bool           // Close was called
	done     chan struct{}  // closed by Close: calls in flight end
	calls    sync.WaitGroup // Acquire and TryAcquire calls in flight
	bg       sync.WaitGroup // background work: cleanups, the TTL index, round trips
	closer   sync.Once
	drained  chan struct{} // closed when Close is over
	closeErr error         // its outcome; set before drained closes
}

// NewProvider returns a Provider for locks in db, or an error wrapping
// ErrInvalidArgument that names the bad option or argument; it does no I/O.
//
// It validates every option. A nil db is an error, and so is a database
// name that MongoDB refuses on some platform (empty, 64 bytes or more, not
// valid UTF-8, or with one of /\. "$*<>:|?, a space or NUL).
//
// A second Provider of the same client, database and collection
// (WithCollection) joins the first's process: its lines of waiters, its
// release events, its collation check and TTL index (see Provider). To be
// a process of its own, as in a test of several processes, give it a
// client of its own.
//
// The lock collection's write concern, read preference and read concern are
// the library's, whatever db and its client say: writes wait for a majority
// (w: "majority"), so that a failover cannot roll back an acquisition or an
// extension, and an acquisition is never sent unacknowledged (w: 0); reads
// go to the primary, at read concern "local". On a replica set that has
// lost its majority, locks can then be neither taken nor extended.
func NewProvider(db *mongo.Database, opts ...Option) (*Provider, error) {
	if db == nil {
		return nil, &Error{Op: opNewProvider, Err: invalid("nil *mongo.Database")}
	}
	o, err := buildConfig(db.Name(), opts)
	if err != nil {
		return nil, &Error{Op: opNewProvider, Err: err}
	}
	return newProvider(o, newCollection(db, o.collection), newCollection(db, o.collection+semSuffix)), nil
}

// newProvider returns a Provider with the options o over the collections
// locks and slots.
func newProvider(o config, locks, slots lockCollection) *Provider {
	p := &Provider{
		locks:   locks,
		slots:   slots,
		opts:    o,
		tel:     telemetry{trace: cmp.Or(o.trace, &Trace{}), log: o.logger},
		senders: make(chan func()),
		done:    make(chan struct{}),
		drained: make(chan struct{}),
	}
	p.leases = newLeases(o, newSuspensions(systemClocks{}, o.expiry), &p.tel)
	for m := range attemptModes {
		a := acquirer{proc: p.locks.process, owner: o.owner, mode: m, expiry: o.expiry, claim: o.claimLifetime(), next: o.nextLifetime(), turn: turnLength}
		p.acquire[m], a.turn = newAcquireParts(a), electionTurn
		p.campaign[m] = newAcquireParts(a)
	}
	return p
}

// A lockCollection is a collection of lock documents: its store, its
// database's name and its own, and what this process keeps for it.
type lockCollection struct {
	store    store
	db, name string
	*collState
}

func newCollection(db *mongo.Database, coll string) lockCollection {
	return lockCollection{newMongoStore(db, coll), db.Name(), coll, collStateFor(db, coll)}
}

// collState is what a process keeps for one collection: the process's id in
// lock documents, its default collation checked once, the TTL index created
// once, the lines of waiters and the release events. A client is one
// process, shared by its Providers; in process memory, each Provider is one.
type collState struct {
	process   string
	collation collationCheck
	indexOnce sync.Once
	bg        sync.WaitGroup // the release source
	lines     lines
	notify    notifier
}

// collationCheck is whether one collection's default collation was checked
// (ensureCollection, in collation.go): the outcome of the first check that
// decided, for the life of the process. A check that failed (the network,
// the server, ctx) decides nothing: the next call checks again.
type collationCheck struct {
	passed atomic.Bool // decided, and not refused: the fast path

	mu      sync.Mutex
	decided bool
	refused error         // when decided: the refusal, or nil
	running chan struct{} // closed when the check in flight ends
}

// collKey identifies a collection of one client, held weakly so that the
// registry does not keep disconnected clients alive.
type collKey struct {
	client   weak.Pointer[mongo.Client]
	db, coll string
}

var collStates sync.Map // collKey -> *collState

// collStateFor returns the state of collection coll of db's client,
// forgotten with the client.
func collStateFor(db *mongo.Database, coll string) *collState {
	k := collKey{client: weak.Make(db.Client()), db: db.Name(), coll: coll}
	if c, ok := collStates.Load(k); ok {
		return c.(*collState)
	}
	c, loaded := collStates.LoadOrStore(k, newCollState())
	if !loaded {
		runtime.AddCleanup(db.Client(), func(k collKey) { collStates.Delete(k) }, k)
	}
	return c.(*collState)
}

// newCollState is the state of a collection that a process has not used yet.
func newCollState() *collState {
	return &collState{process: newLockID(), lines: lines{byName: map[string]*line{}}, notify: notifier{source: watchReleases}}
}

// newLockID is a fresh lockId, or a process's id in lock documents.
func newLockID() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// background runs f in a goroutine counted by the provider's WaitGroup,
// with a context that ends after timeout: every such goroutine has an end.
func (p *Provider) background(timeout time.Duration, f func(ctx context.Context)) {
	p.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		f(ctx)
	})
}

// sendAsync runs job, a round trip whose caller may stop waiting for it,
// as p's background work (what it starts when it ends, a release or a
// withdraw, is started before it counts as done), in a goroutine of its
// own: an idle sender's, or a new one. A sender outlives its job by
// senderIdle, so that back-to-back round trips neither start a goroutine
// nor grow its stack again for the driver's calls. Senders are the
// provider's: none runs another provider's work (a process-wide one would
// tie the providers of separate testing/synctest bubbles together), and
// none outlives its provider's last round trip by more than senderIdle.
// An idle one holds only the channel, not the provider.
func (p *Provider) sendAsync(job func()) {
	p.bg.Add(1)
	counted := func() {
		defer p.bg.Done()
		job()
	}
	select {
	case p.senders <- counted:
	default:
		go sender(p.senders, p.done, counted)
	}
}

// senderIdle is how long a sender waits for another round trip.
const senderIdle = 100 * time.Millisecond

// sender runs job, then the jobs it receives, until it has been idle for
// senderIdle or its provider is closed (done): a closed provider's senders
// end with its last round trip.
func sender(jobs <-chan func(), done <-chan struct{}, job func()) {
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		job()
		job = nil // holds nothing of the provider while idle
		idle.Reset(senderIdle)
		select {
		case job = <-jobs:
		case <-idle.C:
			return
		case <-done:
			return
		}
	}
}

// Close releases every lock that this provider's handles hold, makes its
// calls in flight and later return ErrClosed, and waits for its background
// work to end. It returns the releases' errors, or ctx's if it ends first.
//
// Acquire and TryAcquire calls in flight return ErrClosed, and so do later
// Acquire, TryAcquire and Do calls on its locks; Release of a handle that
// Close released returns nil. The background work is releases of
// acquisitions nobody got a handle for, and the TTL index. Call it when a
// process shuts down: others get its locks at once.
//
// ctx bounds the releases and the wait; if it ends first, Close returns an
// error wrapping ctx's, and the rest goes on in the background for a few
// seconds at most. Otherwise it returns the errors of the releases that
// failed, joined (a lock already lost is not one). Later calls wait for
// the first and return its outcome.
func (p *Provider) Close(ctx context.Context) error {
	if ctx == nil {
		return &Error{Op: opClose, Err: errNilContext}
	}
	p.closer.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.done)
		go func() {
			if err := p.shutdown(ctx); err != nil {
				p.closeErr = &Error{Op: opClose, Err: err}
			}
			close(p.drained)
		}()
	})
	select {
	case <-p.drained:
		return p.closeErr
	case <-ctx.Done():
		return &Error{Op: opClose, Err: ctx.Err()}
	}
}

// shutdown waits for the calls in flight, releases what is held, and waits
// for the background work.
func (p *Provider) shutdown(ctx context.Context) error {
	p.calls.Wait()
	err := p.leases.releaseKept(ctx)
	p.bg.Wait()
	p.locks.notify.stopIdle()
	p.slots.notify.stopIdle()
	return err
}

// enter counts a call in flight, or reports that the provider is closed.
func (p *Provider) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.calls.Add(1)
	}
	return !p.closed
}
