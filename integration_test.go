package mongolock_test

// Many processes: clients of their own contending for one lock, and turns
// between processes (over the model in simulated time where the library
// decides); on the real server, DistributedLock.MongoDB's protocol beside
// this library's, holder processes killed with SIGKILL, and a user with
// only the privileges that locking needs.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/dotnet"
	"github.com/mongolock/mongolock/internal/syncbuf"
	"github.com/mongolock/mongolock/internal/testdb"
)

// Processes contending: never two holders, tokens in acquisition order.

func TestConcurrentAcquirersNeverOverlap(t *testing.T) {
	const clients, perClient = 5, 20
	ctx := boundedCtx(t, 60*time.Second)
	db := testdb.Database(t)
	locks := make([]*mongolock.Lock, clients)
	for i := range locks {
		p := newProvider(t, ownClient(t, db, nil), mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))
		locks[i] = p.Lock("contended")
	}

	var (
		inLock, maxInLock atomic.Int32
		wg                sync.WaitGroup
		mu                sync.Mutex
		errs              []error
		tokens            = map[int64]bool{}
	)
	start := make(chan struct{})
	for i := range clients * perClient {
		wg.Add(1)
		go func(l *mongolock.Lock) {
			defer wg.Done()
			<-start
			h, err := l.Acquire(ctx)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			n := inLock.Add(1)
			for m := maxInLock.Load(); n > m && !maxInLock.CompareAndSwap(m, n); m = maxInLock.Load() {
			}
			mu.Lock()
			tokens[h.FencingToken()] = true
			mu.Unlock()
			inLock.Add(-1)
			if err := h.Release(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(locks[i%clients])
	}
	close(start)
	wg.Wait()

	require.Empty(t, errs)
	require.EqualValues(t, 1, maxInLock.Load(), "holders at once")
	require.Len(t, tokens, clients*perClient, "every goroutine got the lock, each with its own fencing token")
}

// Twenty clients race for each brand-new name at once. On FerretDB some of the
// upserts fail with duplicate-key or "$$NOW cannot be used" errors; the library
// must turn those into "someone else got there first", so that exactly one
// racer wins each name and nobody sees another error.
func TestRaceForNewNamesHasExactlyOneWinnerAndNoErrors(t *testing.T) {
	const racers, rounds = 20, 25
	ctx := boundedCtx(t, 2*time.Minute)
	db := testdb.Database(t)
	providers := make([]*mongolock.Provider, racers)
	for i := range providers {
		// Separate clients, as separate processes would have.
		providers[i] = newProvider(t, ownClient(t, db, nil))
	}
	for round := range rounds {
		name := fmt.Sprintf("fresh-%d", round)
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			mu      sync.Mutex
			errs    []error
			handles []*mongolock.Handle
		)
		start := make(chan struct{})
		for _, p := range providers {
			wg.Add(1)
			go func(l *mongolock.Lock) {
				defer wg.Done()
				<-start
				h, err := l.TryAcquire(ctx)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners.Add(1)
					handles = append(handles, h)
				case !errors.Is(err, mongolock.ErrNotAcquired):
					errs = append(errs, err)
				}
			}(p.Lock(name))
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs, "round %d", round)
		require.EqualValues(t, 1, winners.Load(), "round %d: winners", round)
		for _, h := range handles {
			require.NoError(t, h.Release(ctx))
		}
	}
}

func TestFencingTokensStrictlyIncreaseAcrossProvidersOnSeparateClients(t *testing.T) {
	db := testdb.Database(t)
	ctx := boundedCtx(t, 30*time.Second)
	opts := []mongolock.Option{mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond)}
	var providers []*mongolock.Provider
	for range 2 {
		providers = append(providers, newProvider(t, ownClient(t, db, nil), opts...))
	}

	const perProvider = 25
	var (
		mu      sync.Mutex
		tokens  []int64 // in the order the lock was held
		holders atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, len(providers))
	)
	for _, p := range providers {
		wg.Add(1)
		go func(l *mongolock.Lock) {
			defer wg.Done()
			for range perProvider {
				h, err := l.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, h.FencingToken())
				mu.Unlock()
				holders.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(p.Lock("shared"))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, p := range providers {
		mongolock.WaitBackground(p)
	}

	require.Len(t, tokens, len(providers)*perProvider)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "acquisition %d of %v", i, tokens)
	}
	doc := rawLockDoc(t, db.Collection(mongolock.DefaultCollection), "shared")
	require.Equal(t, tokens[len(tokens)-1], doc.Lookup("fencingToken").Int64())
}

// Turns between processes: a refused Acquire claims the next turn, the
// holder's process steps aside, and every process gets a fair share.

// Several processes (clients with providers of their own), each with several
// goroutines, contend for one lock. The local line hands the lock over
// within a process far faster than another process polls; claims and the
// bounded streak must still give every process at least 1/(2P) of the
// acquisitions.
func TestContendingProcessesEachGetAFairShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const procs, perProc = 3, 4
		ctx := t.Context()
		db := newMemDB(t)
		var (
			counts  [procs]atomic.Int64
			inside  atomic.Int32
			overlap atomic.Bool
			wg      sync.WaitGroup
			errs    = make(chan error, procs*perProc)
		)
		end := time.Now().Add(3 * time.Second)
		for p := range procs {
			prov, network := db.process()
			network.Delay(time.Millisecond / 2) // each round trip's
			l := prov.Lock("fair")
			for range perProc {
				wg.Go(func() {
					for time.Now().Before(end) {
						actx, cancel := context.WithDeadline(ctx, end)
						h, err := l.Acquire(actx)
						cancel()
						if err != nil {
							if !errors.Is(err, context.DeadlineExceeded) {
								errs <- err
							}
							return
						}
						if inside.Add(1) > 1 {
							overlap.Store(true)
						}
						counts[p].Add(1)
						time.Sleep(time.Millisecond) // the critical section
						inside.Add(-1)
						if err := h.Release(ctx); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.False(t, overlap.Load(), "two holders at once")
		var total int64
		for p := range procs {
			total += counts[p].Load()
		}
		for p := range procs {
			t.Logf("process %d: %d of %d acquisitions", p, counts[p].Load(), total)
			require.GreaterOrEqual(t, counts[p].Load()*2*procs, total, "process %d got less than 1/(2P)", p)
		}
		require.Greater(t, total, int64(3*procs), "too few acquisitions to judge")
	})
}

// turnFields is the document's turn state.
type turnFields struct {
	LastProcess    string    `bson:"lastProcess"`
	ProcessStreak  int       `bson:"processStreak"`
	WaitingProcess string    `bson:"waitingProcess"`
	WaitingUntil   time.Time `bson:"waitingUntil"`
	NextProcess    string    `bson:"nextProcess"`
}

func turnOf(t *testing.T, p *mongolock.Provider, name string) turnFields {
	t.Helper()
	var f turnFields
	err := testdb.Client(t).Database(mongolock.DatabaseName(p)).Collection(mongolock.CollectionName(p)).
		FindOne(context.Background(), bson.D{{Key: "_id", Value: name}}).Decode(&f)
	require.NoError(t, err)
	return f
}

// awaitClaim polls until the document holds p's process's claim.
func awaitClaim(t *testing.T, p *mongolock.Provider, name string) {
	t.Helper()
	pollUntil(t, 10*time.Second, "a claim of the waiting process in the document",
		func() bool { return turnOf(t, p, name).WaitingProcess == mongolock.Process(p) })
}

// The turn fields of name's lock document in the model, and waits on
// them, as turnOf and awaitClaim read them on the server.

func (d *memDB) turn(name string) turnFields {
	d.t.Helper()
	var f turnFields
	require.NoError(d.t, bson.Unmarshal(d.doc(mongolock.DefaultCollection, name), &f))
	return f
}

func (d *memDB) awaitClaim(p *mongolock.Provider, name string) {
	d.t.Helper()
	pollUntil(d.t, 10*time.Second, "a claim of the waiting process in the document",
		func() bool { return d.turn(name).WaitingProcess == mongolock.Process(p) })
}

// edit applies update to name's lock document, as someone editing it by
// hand would.
func (d *memDB) edit(name string, update bson.D) {
	d.t.Helper()
	d.editIn(mongolock.DefaultCollection, name, update)
}

// claimAndGiveUp starts an Acquire of name by p, waits until its process's
// claim is in the document, and cancels it; it returns the turn fields read
// while the claim was live. When it returns, p's process has withdrawn the
// claim.
func (d *memDB) claimAndGiveUp(ctx context.Context, p *mongolock.Provider, name string) turnFields {
	d.t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := p.Lock(name).Acquire(wctx); done <- err }()
	d.awaitClaim(p, name)
	live := d.turn(name)
	cancel()
	require.ErrorIs(d.t, <-done, context.Canceled)
	mongolock.WaitBackground(p) // its claim withdrawn
	return live
}

// An attempt that its Acquire abandoned (ctx ended while it was on its
// way), and that lands after the Acquire withdrew its process's claim and
// place, is undone once its reply is in: the place as next after another
// process's claim that it took is withdrawn too.
func TestAnAbandonedAttemptLeavesNoPlaceAsNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "late"
		ctx := t.Context()
		db := newMemDB(t)
		holder, _ := db.process()
		mustTryAcquire(t, ctx, holder.Lock(name))
		claimant, _ := db.process(fastPolls)
		cctx, stopClaimant := context.WithCancel(ctx)
		claiming := acquireInBackground(cctx, claimant.Lock(name))
		db.awaitClaim(claimant, name)

		late, _ := db.process(fastPolls)
		entered, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		mongolock.SetSendHook(late, func() {
			once.Do(func() { close(entered); <-gate }) // the first attempt waits for the gate
		})
		wctx, giveUp := context.WithCancel(ctx)
		waited := acquireInBackground(wctx, late.Lock(name))
		<-entered
		giveUp()
		require.ErrorIs(t, <-waited, context.Canceled)
		synctest.Wait() // its withdraw is done, before its attempt is sent
		close(gate)
		mongolock.WaitBackground(late)
		f := db.turn(name)
		require.Equal(t, mongolock.Process(claimant), f.WaitingProcess, "the claim stays")
		require.NotEqual(t, mongolock.Process(late), f.NextProcess, "a place as next left by an Acquire that gave up")
		stopClaimant()
		<-claiming
	})
}

func TestTryAcquireNeverClaimsATurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process()
		other, _ := db.process()
		holder := mustTryAcquire(t, ctx, other.Lock("try"))
		_, err := p.Lock("try").TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired)
		require.Empty(t, db.turn("try").WaitingProcess, "a refused TryAcquire claimed a turn")
		require.NoError(t, holder.Release(ctx))
		// Free, and claimed by nobody: the holder's process takes it again.
		require.NoError(t, mustTryAcquire(t, ctx, other.Lock("try")).Release(ctx))
	})
}

func TestAWaiterThatGivesUpWithdrawsItsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process(mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
		other, _ := db.process()
		holder := mustTryAcquire(t, ctx, other.Lock("turn"))

		// A waiter of the other process claims the next turn...
		got := acquireInBackground(ctx, p.Lock("turn"))
		db.awaitClaim(p, "turn")
		// ...and gets the lock once the holder releases, which fulfils the
		// claim.
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, <-got)
		require.Empty(t, db.turn("turn").WaitingProcess, "a fulfilled claim stayed")

		// A waiter that gives up withdraws its process's claim: nobody steps
		// aside for it.
		holder = mustTryAcquire(t, ctx, other.Lock("turn"))
		db.claimAndGiveUp(ctx, p, "turn")
		require.Empty(t, db.turn("turn").WaitingProcess, "a waiter that gave up kept its claim")
		require.NoError(t, holder.Release(ctx))
	})
}

// Claims go to the process that has waited longest: an older waiter takes
// a younger process's claim over, and a younger waiter never takes an older
// one's.
func TestTheLongestWaitingProcessHoldsTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		sleeps := mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond)
		holderP, _ := db.process()
		holder := mustTryAcquire(t, ctx, holderP.Lock("fifo"))
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		older, _ := db.process(sleeps)
		wg.Go(func() { releaseIfAcquired(older.Lock("fifo").Acquire(wctx)) })
		db.awaitClaim(older, "fifo")

		// A process that began to wait later (a greater token: as if the
		// lock had changed hands since) polls, and leaves the claim alone.
		db.edit("fifo", bson.D{{Key: "$set", Value: bson.D{{Key: "fencingToken", Value: db.doc(mongolock.DefaultCollection, "fifo").Lookup("fencingToken").Int64() + 1}}}})
		younger, _ := db.process(sleeps)
		var attempts atomic.Int64
		mongolock.SetSendHook(younger, func() { attempts.Add(1) })
		wg.Go(func() { releaseIfAcquired(younger.Lock("fifo").Acquire(wctx)) })
		pollUntil(t, 10*time.Second, "the younger waiter polled twice", func() bool { return attempts.Load() >= 2 })
		require.Equal(t, mongolock.Process(older), db.turn("fifo").WaitingProcess, "a younger waiter took the claim")

		// A claim by a process younger than both: the older one takes it over.
		db.edit("fifo", bson.D{{Key: "$set", Value: bson.D{
			{Key: "waitingProcess", Value: "a-newcomer"},
			{Key: "waitingSince", Value: int64(math.MaxInt64 - 1)},
			{Key: "waitingUntil", Value: time.Now().Add(time.Minute)},
		}}})
		db.awaitClaim(older, "fifo")
		require.NoError(t, holder.Release(ctx))
		cancel()
		wg.Wait()
	})
}

// releaseIfAcquired releases what an Acquire returned, if it acquired.
func releaseIfAcquired(h *mongolock.Handle, err error) {
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Release(ctx)
	}
}

// A claimant whose process died holds a free lock back only while its
// claim lasts: a live claim keeps other processes' Acquire out of a free
// lock (so that the claimant gets in), and a claim counts only its
// lifetime after its process last asked; then a third process's Acquire
// gets the lock.
func TestAClaimantThatDiedHoldsAFreeLockBackOnlyWhileItsClaimLasts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const standby = 100 * time.Millisecond // the longest a waiter that polls fast sleeps
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process(fastPolls, mongolock.WithStandbySleep(standby))
		other, _ := db.process()
		holder := mustTryAcquire(t, ctx, other.Lock("dead"))
		// A slow waiter claims the next turn, and its process dies: cut off
		// from the database, its withdraw never arrives.
		dying, network := db.process(mongolock.WithBusyWaitSleep(time.Second, time.Minute))
		dctx, die := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := dying.Lock("dead").Acquire(dctx); done <- err }()
		db.awaitClaim(dying, "dead")
		asked := time.Now()
		network.Partition()
		die()
		require.Error(t, <-done)
		synctest.Wait()
		require.Equal(t, mongolock.Process(dying), db.turn("dead").WaitingProcess, "the dead claim is in place")

		require.NoError(t, holder.Release(ctx))
		h, err := p.Lock("dead").Acquire(ctx)
		require.NoError(t, err)
		lifetime, took := mongolock.ClaimLifetime(dying), time.Since(asked)
		// asked is when the claim was seen, within a poll after it was made.
		require.GreaterOrEqual(t, took, lifetime-10*time.Millisecond, "a free lock taken from under a live claim")
		require.LessOrEqual(t, took, lifetime+standby+10*time.Millisecond, "a free lock held back past the dead claim's lifetime")
		require.NoError(t, h.Release(ctx))
		network.Heal()
	})
}

// Another process's live claim keeps a freed lock for its claimant: the
// process that released it, asking again at once within its turn, comes
// after the claimant and is next meanwhile, even while the claimant looks
// only now and then. A turn passes the lock on within its process only
// through hand-overs.
func TestAFreedLockGoesToTheClaimantBeforeItsLastHoldersProcessAsksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "claimed"
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process()
		held := mustTryAcquire(t, ctx, p.Lock(name))
		slow, _ := db.process(mongolock.WithBusyWaitSleep(300*time.Millisecond, 300*time.Millisecond))
		mongolock.PollOnly(slow) // no release event wakes it
		claimant := startAcquire(ctx, lockMode(slow, name))
		db.awaitClaim(slow, name)

		require.NoError(t, held.Release(ctx))
		again := startAcquire(ctx, lockMode(p, name))
		pollUntil(t, 10*time.Second, "the releasing process next after the claim", func() bool {
			return db.turn(name).NextProcess == mongolock.Process(p)
		})
		first := awaitAcquired(t, claimant, 10*time.Second, "the claimant")
		require.NoError(t, first.Release(ctx))
		second := awaitAcquired(t, again, 10*time.Second, "the releasing process, asking again")
		require.Less(t, first.FencingToken(), second.FencingToken(), "the releasing process took the freed lock before the claimant")
		require.NoError(t, second.Release(ctx))
	})
}

// A process that took the lock turnLength times in a row steps aside while
// another process's claim is live, and only that long: a claim that is not
// renewed lapses within its lifetime.
func TestAStepAsideLastsNoLongerThanTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process()
		other, _ := db.process()
		l := p.Lock("aside")
		var h *mongolock.Handle
		for i := range mongolock.TurnLength {
			h = mustTryAcquire(t, ctx, l)
			if i < mongolock.TurnLength-1 {
				require.NoError(t, h.Release(ctx))
			}
		}
		require.Equal(t, mongolock.TurnLength, db.turn("aside").ProcessStreak)
		// Another process claims the next turn, then stops asking.
		claim := db.claimAndGiveUp(ctx, other, "aside").WaitingUntil

		require.NoError(t, h.Release(ctx))
		// The claim is not withdrawn here (a claimant that died); the
		// holder's process steps aside until it lapses, and no longer.
		db.edit("aside", bson.D{{Key: "$set", Value: bson.D{
			{Key: "waitingProcess", Value: mongolock.Process(other)}, {Key: "waitingUntil", Value: claim}}}})
		require.Greater(t, time.Until(claim), time.Duration(0), "the claim has lapsed already")
		_, err := l.TryAcquire(ctx)
		require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the holder's process did not step aside")
		time.Sleep(time.Until(claim))
		require.NoError(t, mustTryAcquire(t, ctx, l).Release(ctx), "the holder's process got the lock back once the claim lapsed")
	})
}

// The cron pattern: a process that only ever calls TryAcquire gets a free
// lock even while other processes wait for it in Acquire.
func TestTryAcquireGetsAFreeLockWhileOtherProcessesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db := newMemDB(t)
		p, _ := db.process()
		other, _ := db.process()
		holder := mustTryAcquire(t, ctx, p.Lock("cron"))
		wctx, cancel := context.WithCancel(ctx)
		var waiters sync.WaitGroup
		for range 3 {
			// Waiters that poll rarely, and no release event wakes, so
			// that the free lock is there to take.
			w, _ := db.process(mongolock.WithBusyWaitSleep(5*time.Second, 5*time.Second))
			mongolock.PollOnly(w)
			waiters.Go(func() { _, _ = w.Lock("cron").Acquire(wctx) })
		}
		synctest.Wait() // each has made its first attempt, and sleeps
		require.NotEmpty(t, db.turn("cron").WaitingProcess, "no waiter claimed the next turn")
		require.NoError(t, holder.Release(ctx))
		cron, err := other.Lock("cron").TryAcquire(ctx)
		require.NoError(t, err, "a free lock refused to TryAcquire because others wait")
		require.NoError(t, cron.Release(ctx))
		cancel()
		waiters.Wait()
	})
}

// While a lock is held for long by one process, only the claimant polls
// faster than the configured sleep; the other waiting processes back off,
// whether release events arrive or not.
func TestWhileALockIsHeldOnlyTheClaimantPollsOften(t *testing.T) {
	type acquire func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error)
	const name = "standby"
	for _, c := range []struct {
		kind       string
		holds      int // acquisitions by hold that fill it
		hold, wait acquire
	}{
		{"lock", 1,
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.Lock(name).TryAcquire(ctx)
			},
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.Lock(name).Acquire(ctx)
			}},
		{"semaphore", 2,
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.Semaphore(name, 2).TryAcquire(ctx)
			},
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.Semaphore(name, 2).Acquire(ctx)
			}},
		{"readers-wait-for-a-writer", 1,
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock(name).Writer().TryAcquire(ctx)
			},
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock(name).Reader().Acquire(ctx)
			}},
		{"writers-wait-for-a-reader", 1,
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock(name).Reader().TryAcquire(ctx)
			},
			func(p *mongolock.Provider, ctx context.Context) (*mongolock.Handle, error) {
				return p.RWLock(name).Writer().Acquire(ctx)
			}},
	} {
		for _, events := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/release-events=%v", c.kind, events), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const waiters, hold, standby = 4, 10 * time.Second, time.Second
					ctx := t.Context()
					db := newMemDB(t)
					holderP, _ := db.process()
					held := make([]*mongolock.Handle, c.holds)
					for i := range held {
						var err error
						held[i], err = c.hold(holderP, ctx)
						require.NoError(t, err)
					}

					attempts := make([]atomic.Int64, waiters)
					wctx, cancel := context.WithCancel(ctx)
					var wg sync.WaitGroup
					for i := range waiters {
						p, _ := db.process(mongolock.WithBusyWaitSleep(10*time.Millisecond, 100*time.Millisecond), mongolock.WithStandbySleep(standby))
						mongolock.SetSendHook(p, func() { attempts[i].Add(1) })
						if !events {
							mongolock.PollOnly(p)
						}
						wg.Go(func() {
							h, err := c.wait(p, wctx)
							if err == nil {
								_ = h.Release(ctx)
							}
						})
					}
					time.Sleep(hold) // it is held for this long: what it costs is counted
					cancel()
					wg.Wait()
					for _, h := range held {
						require.NoError(t, h.Release(ctx))
					}
					// The claimant looks at least every 100 ms (the longest
					// sleep, where release events arrive), every 17 ms (a
					// sixth of it) where they do not; the others back off
					// from the shortest sleep, quadrupling, to the standby
					// sleep (less a fifth, its jitter).
					var often int
					for i := range attempts {
						n := attempts[i].Load()
						t.Logf("waiting process %d: %d attempts in %v", i, n, hold)
						if n >= int64(hold/(100*time.Millisecond))-5 {
							often++
						} else {
							require.LessOrEqual(t, n, int64(hold/(standby*4/5))+6, "process %d, not the claimant, did not back off to the standby sleep", i)
						}
					}
					require.Equal(t, 1, often, "processes that polled often while it was held")
				})
			})
		}
	}
}

// DistributedLock.MongoDB: a Go service and a .NET service sharing a lock
// exclude each other.

// dotnetLock is a lock of the C# library DistributedLock.MongoDB 1.0,
// driven through its protocol (internal/dotnet) on a collection of its own
// client, so that these tests can show that a Go service and a .NET service
// sharing a lock exclude each other. It neither extends nor waits: a test
// holds a lock for far less than the expiry and retries as it sees fit.
type dotnetLock struct {
	coll   *mongo.Collection
	name   string
	expiry time.Duration
}

// dotnetHandle is one acquisition by the C# protocol.
type dotnetHandle struct {
	lockID string
	token  int64
}

func newDotnetLock(db *mongo.Database, name string) *dotnetLock {
	return &dotnetLock{coll: db.Collection(mongolock.DefaultCollection), name: name, expiry: dotnet.DefaultExpiry}
}

// tryAcquire makes one attempt. It returns nil and no error when the lock is
// held by someone else, or the attempt lost the race to create the document.
func (l *dotnetLock) tryAcquire(ctx context.Context) (*dotnetHandle, error) {
	lockID := dotnet.NewLockID()
	token, ok, err := dotnet.TryAcquire(ctx, l.coll, l.name, lockID, l.expiry)
	if err != nil || !ok {
		return nil, err
	}
	return &dotnetHandle{lockID: lockID, token: token}, nil
}

// release deletes the document if h still holds the lock, and reports
// whether it did.
func (l *dotnetLock) release(ctx context.Context, h *dotnetHandle) (bool, error) {
	return dotnet.Release(ctx, l.coll, l.name, h.lockID)
}

// interopDoc is the stored lock document, read back to check what each side
// left behind. LockID is "" when the field is absent.
type interopDoc struct {
	LockID       string    `bson:"lockId"`
	AcquiredAt   time.Time `bson:"acquiredAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	FencingToken int64     `bson:"fencingToken"`
}

func readInteropDoc(ctx context.Context, t *testing.T, db *mongo.Database, name string) (doc interopDoc, found bool) {
	t.Helper()
	err := db.Collection(mongolock.DefaultCollection).FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc, false
	}
	require.NoError(t, err)
	return doc, true
}

// interopSides gives each protocol a client of its own, as two services
// would have, on the same fresh database.
func interopSides(t *testing.T, name string, opts ...mongolock.Option) (*mongo.Database, *mongolock.Lock, *dotnetLock) {
	t.Helper()
	db := testdb.Database(t)
	l, err := mongolock.New(db, name, opts...)
	require.NoError(t, err)
	dotnet := newDotnetLock(testdb.NewClient(t).Database(db.Name()), name)
	return db, l, dotnet
}

// On the server, one trial of what the model shows at every point
// (TestLockHeldByDotnetProtocolOverTheModelIsNotAcquiredUntilDotnetReleases):
// the two protocols' statements agree on a real engine. A C# holder's
// document keeps mongolock out, in one attempt and in an Acquire that ends
// once an attempt's reply has shown the lock held; mongolock's attempts
// leave its lockId in place; after the C# release mongolock gets the lock
// with a greater token. The contexts are bounds for failing only: a
// stalled machine makes the test slower, never wrong.
func TestLockHeldByDotnetProtocolIsNotAcquiredByMongolockUntilDotnetReleases(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db := testdb.Database(t)
	var count commandCounter
	l, err := mongolock.New(ownClient(t, db, &count), "shared-report", mongolock.WithBusyWaitSleep(time.Millisecond, 5*time.Millisecond))
	require.NoError(t, err)
	dotnet := newDotnetLock(testdb.NewClient(t).Database(db.Name()), "shared-report")

	dh, err := dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh, "the C# protocol must acquire a lock nobody holds")
	h, err := l.TryAcquire(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.Nil(t, h)

	err = endOnceAnswered(t, ctx, &count, func(ctx context.Context) error { return <-acquireInBackground(ctx, l) })
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "ended while held by someone else the whole time")

	deleted, err := dotnet.release(ctx, dh)
	require.NoError(t, err)
	require.True(t, deleted, "the C# holder's lockId must still be on the document")
	h, err = l.TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, h.FencingToken(), dh.token)
	require.NoError(t, h.Release(ctx))
}

func TestLockHeldByMongolockIsRefusedToDotnetProtocolUntilMongolockReleases(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	db, l, dotnet := interopSides(t, "shared-report")

	h, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	defer func() { _ = h.Release(context.Background()) }()

	dh, err := dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.Nil(t, dh, "the C# protocol must not acquire a lock mongolock holds")
	held, found := readInteropDoc(ctx, t, db, l.Name())
	require.True(t, found)
	require.Equal(t, h.FencingToken(), held.FencingToken, "a refused C# attempt must not change the token")
	require.NotEmpty(t, held.LockID)

	require.NoError(t, h.Release(ctx))
	released, found := readInteropDoc(ctx, t, db, l.Name())
	require.True(t, found, "mongolock's release keeps the document")
	require.Empty(t, released.LockID, "mongolock's release clears the holder")
	require.Equal(t, h.FencingToken(), released.FencingToken, "mongolock's release keeps the token")
	require.True(t, released.ExpiresAt.Before(held.ExpiresAt) && !released.ExpiresAt.Before(held.AcquiredAt),
		"mongolock's release ends the lease now (server time): acquired %v, lease to %v, released at %v", held.AcquiredAt, held.ExpiresAt, released.ExpiresAt)

	dh, err = dotnet.tryAcquire(ctx)
	require.NoError(t, err)
	require.NotNil(t, dh, "the C# protocol must acquire once mongolock released")
	require.Equal(t, h.FencingToken()+1, dh.token)
	deleted, err := dotnet.release(ctx, dh)
	require.NoError(t, err)
	require.True(t, deleted)
}

// DistributedLock.MongoDB's release deletes the document, so on its own its
// tokens restart at 1. A mongolock acquisition after it must still outrank
// every earlier token, and a C# acquisition after mongolock continues from
// mongolock's token.
func TestFencingTokensKeepIncreasingAcrossDotnetDeleteReleases(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	_, l, dotnet := interopSides(t, "shared-report")

	dotnetAcquire := func() *dotnetHandle {
		t.Helper()
		dh, err := dotnet.tryAcquire(ctx)
		require.NoError(t, err)
		require.NotNil(t, dh, "the C# protocol must acquire a free lock")
		return dh
	}
	dotnetRelease := func(dh *dotnetHandle) {
		t.Helper()
		deleted, err := dotnet.release(ctx, dh)
		require.NoError(t, err)
		require.True(t, deleted)
	}
	mongolockAcquire := func() int64 {
		t.Helper()
		h, err := l.TryAcquire(ctx)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
		return h.FencingToken()
	}

	d1 := dotnetAcquire()
	require.EqualValues(t, 1, d1.token, "the C# protocol starts a new document at 1")
	dotnetRelease(d1)

	m1 := mongolockAcquire()
	require.Greater(t, m1, d1.token)

	d2 := dotnetAcquire()
	require.Equal(t, m1+1, d2.token, "the C# protocol continues from mongolock's token")
	dotnetRelease(d2)

	m2 := mongolockAcquire()
	require.Greater(t, m2, d2.token, "mongolock after a C# delete-release must outrank every earlier token")
	t.Logf("tokens: C# %d, mongolock %d, C# %d, mongolock %d", d1.token, m1, d2.token, m2)
}

// Goroutines of both protocols, each with a client of its own, contend for
// one lock for a few seconds (longer, up to a bound, until each protocol
// has held it once: interop promises exclusion, not shares). Inside the lock
// each does a read-modify-write of a counter document, which loses updates
// if two holders ever overlap, and an in-process counter of holders must
// never exceed one.
func TestDotnetAndMongolockContendersNeverOverlap(t *testing.T) {
	const (
		perSide  = 4
		duration = time.Second
	)
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	const name = "shared-counter"
	counter := db.Collection("interop_counter")
	_, err := counter.InsertOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "n", Value: int64(0)}})
	require.NoError(t, err)

	var (
		inside, overlaps atomic.Int32
		acquisitions     [2]atomic.Int64 // [0]: C# protocol, [1]: mongolock
		mu               sync.Mutex
		errs             []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	// critical runs with the lock held, by either side.
	critical := func(c *mongo.Collection) error {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		var doc struct {
			N int64 `bson:"n"`
		}
		if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc); err != nil {
			return err
		}
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: name}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: doc.N + 1}}}})
		return err
	}

	end, bound := time.Now().Add(duration), time.Now().Add(10*duration)
	// until is when a side stops: at the end, or at the bound while it has
	// not held the lock yet.
	until := func(side int) time.Time {
		if acquisitions[side].Load() == 0 {
			return bound
		}
		return end
	}
	var wg sync.WaitGroup
	for range perSide {
		cdb := testdb.NewClient(t).Database(db.Name())
		dotnet := newDotnetLock(cdb, name)
		wg.Go(func() {
			for time.Now().Before(until(0)) {
				dh, err := dotnet.tryAcquire(ctx)
				if err != nil {
					fail(err)
					return
				}
				if dh == nil {
					// DistributedLock's busy wait, shortened.
					time.Sleep(time.Duration(rand.N(20)+1) * time.Millisecond)
					continue
				}
				acquisitions[0].Add(1)
				err = critical(cdb.Collection(counter.Name()))
				deleted, rerr := dotnet.release(ctx, dh)
				if err = errors.Join(err, rerr); err == nil && !deleted {
					err = errors.New("C# release matched nothing: its acquisition was taken over")
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
		mdb := testdb.NewClient(t).Database(db.Name())
		l, err := mongolock.New(mdb, name, mongolock.WithBusyWaitSleep(time.Millisecond, 20*time.Millisecond))
		require.NoError(t, err)
		wg.Go(func() {
			for time.Now().Before(until(1)) {
				stop := until(1)
				actx, acancel := context.WithDeadline(ctx, stop)
				h, err := l.Acquire(actx)
				acancel()
				if err != nil && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(stop) {
					// Contended until the end. Whether the error also says
					// ErrNotAcquired is checked by
					// TestLockHeldByDotnetProtocolIsNotAcquiredByMongolockUntilDotnetReleases.
					return
				}
				if err != nil {
					fail(err)
					return
				}
				acquisitions[1].Add(1)
				err = critical(mdb.Collection(counter.Name()))
				if err = errors.Join(err, h.Release(ctx)); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()

	require.Empty(t, errs)
	require.Zero(t, overlaps.Load(), "two holders overlapped")
	total := acquisitions[0].Load() + acquisitions[1].Load()
	var doc struct {
		N int64 `bson:"n"`
	}
	require.NoError(t, counter.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc))
	require.Equal(t, total, doc.N, "the counter lost updates: two holders overlapped")
	require.Positive(t, acquisitions[0].Load(), "the C# protocol never got the lock")
	require.Positive(t, acquisitions[1].Load(), "mongolock never got the lock")

	t.Logf("acquisitions in %v: C# protocol %d, mongolock %d", time.Since(end.Add(-duration)).Round(time.Millisecond), acquisitions[0].Load(), acquisitions[1].Load())
}

// DistributedLock.MongoDB's release deletes the document; the next acquisition
// re-creates it. When that is a mongolock acquisition, its token must outrank
// every token before it, also while many acquirers of both protocols contend.
// Holders are exclusive, so recording tokens with the lock held records them in
// acquisition order.
func TestMongolockTokensOutrankEveryEarlierTokenWhileContendingWithDotnetReleases(t *testing.T) {
	const (
		mongolockers = 6
		dotnets      = 4
		duration     = time.Second
	)
	ctx := boundedCtx(t, time.Minute)
	db := testdb.Database(t)
	const name = "shared-ledger"

	var (
		mu           sync.Mutex
		highest      int64
		acquisitions [2]int // [0]: C# protocol, [1]: mongolock
		violations   []string
		errs         []error
	)
	record := func(token int64, mongolockSide bool) {
		mu.Lock()
		defer mu.Unlock()
		if mongolockSide && token <= highest && len(violations) < 5 {
			violations = append(violations, fmt.Sprintf("mongolock acquisition %d got token %d, not above the highest before it, %d (%d ms of server time below)",
				acquisitions[0]+acquisitions[1]+1, token, highest, (highest-token)/1024))
		}
		highest = max(highest, token)
		if mongolockSide {
			acquisitions[1]++
		} else {
			acquisitions[0]++
		}
	}
	stop := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) > 0 || len(errs) > 0
	}
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}

	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range dotnets {
		dotnet := newDotnetLock(testdb.NewClient(t).Database(db.Name()), name)
		wg.Go(func() {
			for time.Now().Before(end) && !stop() {
				dh, err := dotnet.tryAcquire(ctx)
				if err == nil && dh != nil {
					record(dh.token, false)
					var deleted bool
					if deleted, err = dotnet.release(ctx, dh); err == nil && !deleted {
						err = errors.New("C# release matched nothing: its acquisition was taken over")
					}
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	for range mongolockers {
		l, err := mongolock.New(testdb.NewClient(t).Database(db.Name()), name)
		require.NoError(t, err)
		wg.Go(func() {
			for time.Now().Before(end) && !stop() {
				h, err := l.TryAcquire(ctx)
				if errors.Is(err, mongolock.ErrNotAcquired) {
					continue
				}
				if err == nil {
					record(h.FencingToken(), true)
					err = h.Release(ctx)
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()

	require.Empty(t, errs)
	require.Empty(t, violations, "fencing tokens went backwards")
	require.Positive(t, acquisitions[0], "the C# protocol never got the lock")
	require.Positive(t, acquisitions[1], "mongolock never got the lock")
	t.Logf("acquisitions in %v: C# protocol %d, mongolock %d", time.Since(end.Add(-duration)).Round(time.Millisecond), acquisitions[0], acquisitions[1])
}

// Killed processes: a child process of the test binary holds a lock, a
// semaphore's slots, or an RWLock, and is killed with SIGKILL.

// The child process's environment: TestHelperProcess runs only when
// childEnvFlag is "1".
const (
	childEnvFlag = "MONGOLOCK_HELPER"
	childEnvURI  = "MONGOLOCK_HELPER_URI"
	childEnvDB   = "MONGOLOCK_HELPER_DB"
	childEnvLock = "MONGOLOCK_HELPER_LOCK"
	// What the child holds: a key of holdings.
	childEnvHolds = "MONGOLOCK_HELPER_HOLDS"

	childExpiry = 2 * time.Second
)

// holding is what a killed child holds, of a provider: how the child takes
// it, how the parent is refused while the child lives, and how the parent
// takes it over once the child is dead.
type holding struct {
	// coll is the collection of the document.
	coll func(db *mongo.Database) *mongo.Collection
	// take is the child's acquisition: every handle it holds.
	take func(ctx context.Context) ([]*mongolock.Handle, error)
	// tryTake is the parent's one attempt while the child lives.
	tryTake func(ctx context.Context) (*mongolock.Handle, error)
	// takeOver is the parent's waiting acquisition once the child is dead.
	takeOver func(ctx context.Context) (*mongolock.Handle, error)
	// leader is the child's value, for an election: the Leader while the
	// child lives ("successor", the parent's, after).
	leader string
}

// holdings are what a killed child can hold, by childEnvHolds: of name, on
// p.
var holdings = map[string]func(p *mongolock.Provider, name string) holding{
	"lock": func(p *mongolock.Provider, name string) holding {
		l := p.Lock(name)
		return holding{coll: lockColl, take: one(l.Acquire), tryTake: l.TryAcquire, takeOver: l.Acquire}
	},
	"leader": func(p *mongolock.Provider, name string) holding {
		e := p.Election(name)
		return holding{coll: lockColl, take: one(campaign(e, leaderValue)), tryTake: p.Lock(name).TryAcquire,
			takeOver: campaign(e, "successor"), leader: leaderValue}
	},
	// Both slots of a semaphore of two.
	"semaphore": func(p *mongolock.Provider, name string) holding {
		s := p.Semaphore(name, 2)
		both := func(ctx context.Context) ([]*mongolock.Handle, error) {
			var hs []*mongolock.Handle
			for range 2 {
				h, err := s.Acquire(ctx)
				if err != nil {
					return hs, err
				}
				hs = append(hs, h)
			}
			return hs, nil
		}
		return holding{coll: semColl, take: both, tryTake: s.TryAcquire, takeOver: s.Acquire}
	},
	// An RWLock held for reading, taken over by a writer.
	"read": func(p *mongolock.Provider, name string) holding {
		rw := p.RWLock(name)
		return holding{coll: semColl, take: one(rw.Reader().Acquire), tryTake: rw.Writer().TryAcquire, takeOver: rw.Writer().Acquire}
	},
	// An RWLock held for writing, taken over by a reader.
	"write": func(p *mongolock.Provider, name string) holding {
		rw := p.RWLock(name)
		return holding{coll: semColl, take: one(rw.Writer().Acquire), tryTake: rw.Reader().TryAcquire, takeOver: rw.Reader().Acquire}
	},
}

// leaderValue is the value a killed child leads its election with.
const leaderValue = "http://10.0.0.7:8080"

func lockColl(db *mongo.Database) *mongo.Collection {
	return db.Collection(mongolock.DefaultCollection)
}

// one makes an acquisition of one handle an acquisition of a list.
func one(acquire func(context.Context) (*mongolock.Handle, error)) func(context.Context) ([]*mongolock.Handle, error) {
	return func(ctx context.Context) ([]*mongolock.Handle, error) {
		h, err := acquire(ctx)
		if err != nil {
			return nil, err
		}
		return []*mongolock.Handle{h}, nil
	}
}

// campaign is an acquisition that leads e with value.
func campaign(e *mongolock.Election, value string) func(context.Context) (*mongolock.Handle, error) {
	return func(ctx context.Context) (*mongolock.Handle, error) {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			return nil, err
		}
		return l.Handle, nil
	}
}

// TestHelperProcess is not a test: it is the child process of the
// TestKilled… tests, which re-execute the test binary to run only this
// function. It takes what childEnvHolds names with a short expiry, prints
// "acquired <its greatest token>", and keeps holding it (extending its
// leases) until it is killed, or until its stdin closes because the parent
// is gone, so that it never outlives a parent that died.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(childEnvFlag) != "1" {
		t.Skip("the child process of the TestKilled… tests; runs only when started by one")
	}
	hold, ok := holdings[os.Getenv(childEnvHolds)]
	require.True(t, ok, "%s=%q", childEnvHolds, os.Getenv(childEnvHolds))
	ctx := boundedCtx(t, 30*time.Second)
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(childEnvURI)))
	require.NoError(t, err)
	defer func() { _ = client.Disconnect(context.Background()) }()
	p, err := mongolock.NewProvider(client.Database(os.Getenv(childEnvDB)), mongolock.WithExpiry(childExpiry))
	require.NoError(t, err)
	hs, err := hold(p, os.Getenv(childEnvLock)).take(ctx)
	defer func() {
		for _, h := range hs {
			_ = h.Release(context.Background())
		}
	}()
	require.NoError(t, err)
	var token int64
	for _, h := range hs {
		token = max(token, h.FencingToken())
	}
	fmt.Printf("acquired %d\n", token)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills us or goes away
}

// A holder process that dies (SIGKILL: no release, no cleanup) stops extending
// its lease; another process can take the lock once the lease has expired on
// the server, not before, and then within the expiry plus the waiter's longest
// sleep, with a greater fencing token. Several children are killed at once,
// each at a random point of its extension cycle.
func TestKilledHolderProcessIsTakenOverAfterItsLeaseExpires(t *testing.T) {
	killedHolderTrials(t, "lock", "nightly-job", 4)
}

// The same for an election: another process leads once the killed
// leader's lease has expired, within the expiry and its longest sleep.
func TestKilledLeaderProcessIsSucceededAfterItsLeaseExpires(t *testing.T) {
	killedHolderTrials(t, "leader", "scheduler", 2)
}

// The same for a semaphore of two slots, both held by the killed process:
// another process gets a slot once a lease of the child's has expired, not
// before, with a token greater than the child's.
func TestKilledSemaphoreHolderProcessFreesASlotAfterItsLeaseExpires(t *testing.T) {
	killedHolderTrials(t, "semaphore", "exports", 2)
}

// The same for an RWLock held for reading by the killed process: a writer
// gets it once the reader's lease has expired, not before.
func TestKilledReaderProcessIsTakenOverByAWriterAfterItsLeaseExpires(t *testing.T) {
	killedHolderTrials(t, "read", "catalog-r", 2)
}

// The same for an RWLock held for writing by the killed process: a reader
// gets it once the writer's lease has expired, not before.
func TestKilledWriterProcessIsTakenOverByAReaderAfterItsLeaseExpires(t *testing.T) {
	killedHolderTrials(t, "write", "catalog-w", 2)
}

// killedHolderTrials runs trials of killedHolderTrial at once, each on a
// name of its own.
func killedHolderTrials(t *testing.T, holds, name string, trials int) {
	for i := range trials {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			killedHolderTrial(t, holds, fmt.Sprintf("%s-%d", name, i))
		})
	}
}

// killWaitMax is the longest sleep of the process waiting to take over.
const killWaitMax = 50 * time.Millisecond

// killSlack covers the round trips and scheduling delays on top of the
// expiry and the longest sleep: generous, as a machine loaded with other
// test runs stalls processes for a second or more. That a waiter finds a
// freed lock within its longest sleep is the model's test of the sleeps'
// bounds (TestGuaranteeSleepsKeepTheirBounds).
const killSlack = 3 * time.Second

// lease is one acquisition's, as its document records it.
type lease struct {
	AcquiredAt time.Time `bson:"acquiredAt"`
	ExpiresAt  time.Time `bson:"expiresAt"`
	Token      int64     `bson:"token"`
}

// readLeases reads the leases of name's document in coll: a lock's one, or
// a semaphore's or an RWLock's holders.
func readLeases(ctx context.Context, t *testing.T, coll *mongo.Collection, name string) []lease {
	t.Helper()
	var doc struct {
		Kind         string    `bson:"kind"`
		Holders      []lease   `bson:"holders"`
		AcquiredAt   time.Time `bson:"acquiredAt"`
		ExpiresAt    time.Time `bson:"expiresAt"`
		FencingToken int64     `bson:"fencingToken"`
	}
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&doc), "the document of %q", name)
	if doc.Kind != "" {
		return doc.Holders
	}
	return []lease{{AcquiredAt: doc.AcquiredAt, ExpiresAt: doc.ExpiresAt, Token: doc.FencingToken}}
}

// ending returns the earliest and latest ends of leases.
func ending(leases []lease) (first, last time.Time) {
	for i, l := range leases {
		if i == 0 || l.ExpiresAt.Before(first) {
			first = l.ExpiresAt
		}
		if l.ExpiresAt.After(last) {
			last = l.ExpiresAt
		}
	}
	return first, last
}

// killedHolderTrial kills a child that holds name as holdings[holds] says,
// and takes over.
func killedHolderTrial(t *testing.T, holds, name string) {
	ctx := boundedCtx(t, 60*time.Second)
	db := testdb.Database(t)
	p := newProvider(t, db, mongolock.WithBusyWaitSleep(5*time.Millisecond, killWaitMax))
	hold := holdings[holds](p, name)
	coll := hold.coll(db)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(),
		childEnvFlag+"=1",
		childEnvURI+"="+testdb.Info(t).URI,
		childEnvDB+"="+db.Name(),
		childEnvLock+"="+name,
		childEnvHolds+"="+holds,
		testdb.EnvURI+"="+testdb.Info(t).URI, // so that the child's TestMain looks for no server
	)
	var output syncbuf.Buffer // the child's stdout and stderr, for failure messages
	cmd.Stderr = &output
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	// The reader forwards the "acquired" line, keeps every line for failure
	// messages, and drains stdout to EOF, which cmd.Wait requires before it
	// is called.
	acquiredLine := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(acquiredLine)
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(&output, line)
			if !sent && strings.HasPrefix(line, "acquired ") {
				acquiredLine <- line
				sent = true
			}
		}
	}()
	var reapOnce sync.Once
	var waitErr error
	reap := func() {
		reapOnce.Do(func() {
			_ = cmd.Process.Kill()
			<-readDone
			waitErr = cmd.Wait()
			_ = stdin.Close()
		})
	}
	t.Cleanup(reap) // also when the test fails: the child never outlives it

	var childToken int64
	select {
	case line, ok := <-acquiredLine:
		require.True(t, ok, "the child exited without acquiring; its output:\n%s", output.String())
		childToken, err = strconv.ParseInt(strings.TrimPrefix(line, "acquired "), 10, 64)
		require.NoError(t, err, "line %q", line)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the child did not acquire within 30s", "its output:\n%s", output.String())
	}

	// Kill the child only once it has extended its leases: it is alive and
	// keeping them, and they then end only because the child died.
	_, firstEnd := ending(readLeases(ctx, t, coll, name))
	pollUntil(t, 2*childExpiry, "the child extending its leases", func() bool {
		end, _ := ending(readLeases(ctx, t, coll, name))
		return end.After(firstEnd)
	})

	// Then kill it at a random point of its extension cycle (this wait
	// chooses the phase; it synchronises nothing).
	time.Sleep(time.Duration(rand.Int64N(int64(childExpiry / 3))))

	h, err := hold.tryTake(ctx)
	require.ErrorIs(t, err, mongolock.ErrNotAcquired, "the child holds %q", name)
	require.Nil(t, h)
	election := p.Election(name)
	if hold.leader != "" {
		leader, err := election.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, hold.leader, leader.Value, "the child leads")
	}

	killedAt := time.Now()
	reap()
	var exitErr *exec.ExitError
	require.ErrorAs(t, waitErr, &exitErr, "the child must have been killed, not have exited on its own")

	// Whatever leases the child last wrote are what the server must honour.
	// The first to end frees what the parent asks for: a semaphore's slot;
	// a child holds anything else once.
	leaseEnd, _ := ending(readLeases(ctx, t, coll, name))

	actx, acancel := context.WithTimeout(ctx, 4*childExpiry)
	defer acancel()
	h, err = hold.takeOver(actx)
	require.NoError(t, err, "%q must be free once the killed child's lease has expired", name)
	took := time.Since(killedAt)
	t.Cleanup(func() { _ = h.Release(context.Background()) }) // on failure below

	after := readLeases(ctx, t, coll, name)
	i := slices.IndexFunc(after, func(l lease) bool { return l.Token == h.FencingToken() })
	require.GreaterOrEqual(t, i, 0, "the parent's lease is not in the document: %+v", after)
	takenAt := after[i].AcquiredAt
	require.False(t, takenAt.Before(leaseEnd),
		"taken over at %v (server time), before the child's lease ended at %v", takenAt, leaseEnd)
	require.Greater(t, h.FencingToken(), childToken)
	if hold.leader != "" {
		leader, err := election.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "successor", leader.Value)
	}
	require.Less(t, took, childExpiry+killWaitMax+killSlack,
		"taken over %v after SIGKILL; the expiry is %v and the longest sleep %v", took, childExpiry, killWaitMax)
	require.Less(t, takenAt.Sub(leaseEnd), killWaitMax+killSlack,
		"taken over %v after the child's lease ended (server time)", takenAt.Sub(leaseEnd))
	require.NoError(t, h.Release(ctx))
	t.Logf("%s: acquired %v after SIGKILL (expiry %v), %v after the child's lease ended (server time); tokens: child %d, parent %d (+%d)",
		holds, took.Round(time.Millisecond), childExpiry, takenAt.Sub(leaseEnd),
		childToken, h.FencingToken(), h.FencingToken()-childToken)
}

// Permissions.

// The privileges locking needs: find, insert and update on the lock
// collection. Without createIndex the TTL index is not created, and nothing
// else changes; without changeStream (replica sets) waiters poll.
//
// It needs a server that enforces access control and has custom roles,
// with MONGOLOCK_TEST_URI authenticating a user allowed to create roles and
// users (userAdmin on the test databases, e.g. root). FerretDB has neither
// (--no-auth; no createRole): there
// TestAcquireWorksWhenAnExpiresAtIndexExistsWithOtherOptions makes
// createIndexes fail another way.
func TestLockingNeedsOnlyFindInsertUpdateOnTheCollection(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	admin := testdb.Client(t)
	db := testdb.Database(t)
	var status struct {
		AuthInfo struct {
			Users []bson.Raw `bson:"authenticatedUsers"`
		} `bson:"authInfo"`
	}
	require.NoError(t, admin.Database("admin").RunCommand(ctx, bson.D{{Key: "connectionStatus", Value: 1}}).Decode(&status))
	if len(status.AuthInfo.Users) == 0 {
		t.Skipf("needs a server that enforces access control, with MONGOLOCK_TEST_URI authenticating a user that may create roles; %s does not authenticate this client", testdb.Info(t).Name())
	}
	const role, user, pwd = "mongolock_locker", "mongolock_locker", "mongolock-test-password"
	err := db.RunCommand(ctx, bson.D{
		{Key: "createRole", Value: role},
		{Key: "privileges", Value: bson.A{bson.D{
			{Key: "resource", Value: bson.D{{Key: "db", Value: db.Name()}, {Key: "collection", Value: mongolock.DefaultCollection}}},
			{Key: "actions", Value: bson.A{"find", "insert", "update"}},
		}}},
		{Key: "roles", Value: bson.A{}},
	}).Err()
	if err != nil {
		t.Skipf("needs custom roles (createRole), which %s refused: %v", testdb.Info(t).Name(), err)
	}
	t.Cleanup(func() { _ = db.RunCommand(context.Background(), bson.D{{Key: "dropRole", Value: role}}).Err() })
	require.NoError(t, db.RunCommand(ctx, bson.D{
		{Key: "createUser", Value: user}, {Key: "pwd", Value: pwd},
		{Key: "roles", Value: bson.A{bson.D{{Key: "role", Value: role}, {Key: "db", Value: db.Name()}}}},
	}).Err())
	t.Cleanup(func() { _ = db.RunCommand(context.Background(), bson.D{{Key: "dropUser", Value: user}}).Err() })

	c := testdb.NewClient(t, options.Client().SetAuth(options.Credential{Username: user, Password: pwd, AuthSource: db.Name()}))
	coll := c.Database(db.Name()).Collection(mongolock.DefaultCollection)
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "x", Value: 1}}})
	var se mongo.ServerError
	require.ErrorAs(t, err, &se, "the user may create indexes: the test proves nothing")
	require.True(t, se.HasErrorCode(13), "want Unauthorized (13): %v", err)

	// Acquire (creating the document), be waited for, be extended twice,
	// release, and Do: all as the restricted user. Extensions every 100ms
	// of a 10s lease: a machine stalled for seconds loses nothing, and the
	// wait ends only once replies said the lock was held.
	opts := []mongolock.Option{mongolock.WithExpiry(10 * time.Second), mongolock.WithExtensionCadence(100 * time.Millisecond)}
	p := newProvider(t, c.Database(db.Name()), opts...)
	var count commandCounter
	other := newProvider(t, ownClient(t, db, &count), opts...)
	h, err := p.Lock("restricted").Acquire(ctx)
	require.NoError(t, err)
	for range 2 {
		since := rawLockDoc(t, db.Collection(mongolock.DefaultCollection), "restricted").Lookup("expiresAt").Time()
		pollUntil(t, 20*time.Second, "an extension by the restricted user", func() bool {
			return rawLockDoc(t, db.Collection(mongolock.DefaultCollection), "restricted").Lookup("expiresAt").Time().After(since)
		})
	}
	require.False(t, closedNow(h.Lost()), "Lost of a handle extended by the restricted user")
	err = endOnceAnswered(t, ctx, &count, func(ctx context.Context) error { return <-acquireInBackground(ctx, other.Lock("restricted")) })
	require.ErrorIs(t, err, mongolock.ErrNotAcquired)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, p.Lock("restricted").Do(ctx, func(context.Context) error { return nil }))
	mongolock.WaitBackground(p)

	// Inspection and force release need nothing on the semaphores'
	// collection: without it, they show and free locks alone.
	info, err := p.Inspect(ctx, "restricted")
	require.NoError(t, err)
	require.Equal(t, mongolock.KindLock, info.Kind)
	_, err = p.Inspect(ctx, "none")
	require.ErrorIs(t, err, mongolock.ErrNoLock)
	var listed []string
	for info, err := range p.Locks(ctx, "") {
		require.NoError(t, err)
		listed = append(listed, info.Name)
	}
	require.Equal(t, []string{"restricted"}, listed)
	releaseAtCleanup(t, mustTryAcquire(t, ctx, other.Lock("restricted")))
	released, err := p.ForceRelease(ctx, "restricted")
	require.NoError(t, err)
	require.True(t, released)
	released, err = p.ForceReleaseHolder(ctx, "restricted", "0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	require.False(t, released)

	// The TTL index was tried, and refused.
	names, err := db.Collection(mongolock.DefaultCollection).Indexes().ListSpecifications(ctx)
	require.NoError(t, err)
	for _, s := range names {
		require.NotEqual(t, mongolock.TTLIndexName, s.Name, "created without the privilege?")
	}
}
