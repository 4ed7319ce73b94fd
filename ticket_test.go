package mongolock_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
	"github.com/mongolock/mongolock/internal/conformance"
	"github.com/mongolock/mongolock/internal/memdb"
)

// Take-over by ticket, over the model in simulated time: every kind and
// mode is taken over in one statement, with a token above every earlier
// one, nobody getting in between; the old handle is lost; a ticket works
// once, and a stale one changes nothing; waiters keep their place.

// ticketed is one kind and mode of acquisition, as a holder makes it.
type ticketed struct {
	name string
	take func(t *testing.T, p *mongolock.Provider) *mongolock.Handle
	// write: the holder keeps every other holder out (a lock, a leader,
	// an RWLock's writer); shared: another reader may join it.
	write, shared bool
	coll          string // its document's collection
}

func ticketedKinds() []ticketed {
	ctx := context.Background()
	try := func(l func(p *mongolock.Provider) *mongolock.Lock) func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
		return func(t *testing.T, p *mongolock.Provider) *mongolock.Handle { return mustTryAcquire(t, ctx, l(p)) }
	}
	rw := func(p *mongolock.Provider) *mongolock.RWLock { return p.RWLock("x") }
	// upgradeable takes an upgradeable reader, and upgrades it up times
	// and downgrades it down times, in turn.
	upgradeable := func(up, down int) func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
		return func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
			h := mustTryUpgradeable(t, ctx, rw(p).Upgradeable())
			for i := range up {
				require.NoError(t, h.Upgrade(ctx))
				if i < down {
					require.NoError(t, h.Downgrade(ctx))
				}
			}
			return h.Handle
		}
	}
	return []ticketed{
		{name: "lock", take: try(func(p *mongolock.Provider) *mongolock.Lock { return p.Lock("x") }), write: true, coll: mongolock.DefaultCollection},
		{name: "leadership", take: func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
			l, err := p.Election("x").Campaign(ctx, "v1")
			require.NoError(t, err)
			return l.Handle
		}, write: true, coll: mongolock.DefaultCollection},
		{name: "semaphore slot", take: func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
			h, err := p.Semaphore("x", 2).TryAcquire(ctx)
			require.NoError(t, err)
			return h
		}, coll: memSemColl},
		{name: "weighted semaphore", take: func(t *testing.T, p *mongolock.Provider) *mongolock.Handle {
			h, err := p.Semaphore("x", 3).Units(2).TryAcquire(ctx)
			require.NoError(t, err)
			return h
		}, coll: memSemColl},
		{name: "reader", take: try(func(p *mongolock.Provider) *mongolock.Lock { return rw(p).Reader() }), shared: true, coll: memSemColl},
		{name: "upgradeable reader", take: upgradeable(0, 0), shared: true, coll: memSemColl},
		{name: "writer", take: try(func(p *mongolock.Provider) *mongolock.Lock { return rw(p).Writer() }), write: true, coll: memSemColl},
		{name: "upgraded reader", take: upgradeable(1, 0), write: true, coll: memSemColl},
		{name: "downgraded upgraded reader", take: upgradeable(1, 1), shared: true, coll: memSemColl},
	}
}

// A ticket is a URL-safe string that says what it is and what version.
func TestATicketIsURLSafeAndVersioned(t *testing.T) {
	for _, k := range ticketedKinds() {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, _ := newMemDB(t).process()
				h := releaseAtCleanup(t, k.take(t, p))
				ticket, err := h.Ticket()
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(ticket, "mlt1_"), ticket)
				require.Equal(t, url.QueryEscape(ticket), ticket, "not URL-safe")
				again, err := h.Ticket()
				require.NoError(t, err)
				require.Equal(t, ticket, again, "a handle's ticket changes")
			})
		})
	}
}

// Every kind and mode is taken over whole: the taker's handle is of the
// same mode, held by the taker's owner with a token above the holder's;
// the holder, in this program, is lost at once, taken over, its Release
// frees nothing and returns nil (a hand-off is not a failure), and the
// taker keeps its lease until it releases.
func TestTakeOverHandsEveryKindOver(t *testing.T) {
	for _, k := range ticketedKinds() {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				d := newMemDB(t)
				holder, _ := d.process(mongolock.WithOwner("holder"), mongolock.WithExpiry(memExpiry))
				taker, _ := d.process(mongolock.WithOwner("taker"), mongolock.WithExpiry(memExpiry))
				rival, _ := d.process(mongolock.WithOwner("rival"), mongolock.WithExpiry(memExpiry))
				old := releaseAtCleanup(t, k.take(t, holder))
				ticket, err := old.Ticket()
				require.NoError(t, err)

				h, err := taker.TakeOver(ctx, ticket)
				require.NoError(t, err)
				releaseAtCleanup(t, h)
				require.Equal(t, "x", h.Name())
				require.Equal(t, "taker", h.Owner())
				require.Greater(t, h.FencingToken(), old.FencingToken())
				require.True(t, closedNow(old.Lost()), "the holder is not told at once")
				requireTakenOver(t, old)

				require.Equal(t, h.FencingToken(), requireHeldBy(t, rival, h, k.write).FencingToken, "not the greatest token")
				// The modes: a writer's keeps a reader out; a reader's lets
				// one in.
				if k.coll == memSemColl && k.name != "semaphore slot" && k.name != "weighted semaphore" {
					r, err := rival.RWLock("x").Reader().TryAcquire(ctx)
					if k.shared {
						require.NoError(t, err, "a reader is kept out by a taken %s", k.name)
						require.NoError(t, r.Release(ctx))
					} else {
						require.ErrorIs(t, err, mongolock.ErrNotAcquired)
					}
				}

				time.Sleep(3 * memExpiry) // the taker's lease is extended
				require.False(t, closedNow(h.Lost()), "the taker lost it")
				require.NoError(t, old.Release(ctx), "the Release of a handle taken over")
				requireHeldBy(t, rival, h, k.write)
				// The taker's handle is in the holder's mode; an upgradeable
				// reader's upgrades and downgrades as one.
				u := &mongolock.UpgradeableHandle{Handle: h}
				switch k.name {
				case "upgradeable reader", "downgraded upgraded reader":
					require.ErrorIs(t, u.Downgrade(ctx), mongolock.ErrMismatch)
					require.NoError(t, u.Upgrade(ctx))
				case "upgraded reader":
					require.ErrorIs(t, u.Upgrade(ctx), mongolock.ErrMismatch)
					require.NoError(t, u.Downgrade(ctx))
				default: // not an upgradeable reader's, a writer's neither
					require.ErrorIs(t, u.Upgrade(ctx), mongolock.ErrMismatch)
					require.ErrorIs(t, u.Downgrade(ctx), mongolock.ErrMismatch)
				}
				require.NoError(t, h.Release(ctx))
				info, err := rival.Inspect(ctx, "x")
				require.NoError(t, err)
				require.False(t, info.Held, "released, yet held: %+v", info)
			})
		})
	}
}

// requireTakenOver checks that h's Context ended with the cause of a
// take-over by ticket, which is a loss too.
func requireTakenOver(t *testing.T, h *mongolock.Handle) {
	t.Helper()
	cause := context.Cause(h.Context())
	require.ErrorIs(t, cause, mongolock.ErrTakenOver)
	require.ErrorIs(t, cause, mongolock.ErrLockLost)
}

// requireHeldBy checks, through p, that h's acquisition alone holds its
// name, with h's token, and returns what p saw.
func requireHeldBy(t *testing.T, p *mongolock.Provider, h *mongolock.Handle, write bool) mongolock.LockInfo {
	t.Helper()
	info, err := p.Inspect(t.Context(), h.Name())
	require.NoError(t, err)
	require.Len(t, info.Holders, 1, "%+v", info)
	require.Equal(t, "taker", info.Holders[0].Owner)
	require.Equal(t, h.FencingToken(), info.Holders[0].FencingToken)
	if info.Kind == mongolock.KindRWLock {
		require.Equal(t, write, info.Holders[0].Write, "%+v", info.Holders[0])
	}
	return info
}

// A holder in another program learns of the take-over at its next
// extension, within the extension cadence, and not before: until then the
// taker's token fences it. It learns that it was taken over, and its
// Release returns nil.
func TestATakeOverElsewhereIsLostAtTheNextExtension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		holder, _, taker := newMemDB(t).holderAndRival(mongolock.WithExpiry(memExpiry))
		old := releaseAtCleanup(t, mustTryAcquire(t, ctx, holder.Lock("x")))
		h, err := taker.TakeOver(ctx, mongolock.UntrackedTicket(old))
		require.NoError(t, err)
		releaseAtCleanup(t, h)
		require.False(t, closedNow(old.Lost()), "told, though not of this program")
		time.Sleep(memExpiry / 3) // one cadence
		synctest.Wait()
		require.True(t, closedNow(old.Lost()), "not lost at the next extension")
		requireTakenOver(t, old)
		require.NoError(t, old.Release(ctx), "the Release of a handle taken over elsewhere")
		require.False(t, closedNow(h.Lost()))
	})
}

// A hand-off is not a failure, also where the taker is another process,
// for every kind and mode: the old holder, which this program does not
// tell, learns that it was taken over at its Release if that comes first
// (its release matches nothing, and the document records the take-over),
// else at its next extension; either way its Release returns nil, its
// Context ends with ErrTakenOver, an ErrLockLost, Lost closes, and the
// loss's hook says taken_over. A loss that was not a take-over is still
// ErrLockLost, though the document records an earlier take-over. Over the
// model and the server.
func TestAHandOffElsewhereIsNotAFailure(t *testing.T) {
	for _, k := range ticketedKinds() {
		t.Run(k.name, func(t *testing.T) {
			conformance.Over(t, func(e *conformance.Env) { handOffElsewhere(e, k) })
		})
	}
}

func handOffElsewhere(e *conformance.Env, k ticketed) {
	t, ctx := e.T, e.Ctx
	var mu sync.Mutex
	var losses []mongolock.LossInfo
	trace := mongolock.WithTrace(&mongolock.Trace{Lost: func(info mongolock.LossInfo) {
		mu.Lock()
		defer mu.Unlock()
		losses = append(losses, info)
	}})
	// A lease of a minute: its next extension comes long after the test's
	// Release. A StallProof one: its next extension comes within 250 ms.
	slow, _ := e.Process(mongolock.WithOwner("holder"), mongolock.WithExpiry(time.Minute), trace)
	quick, _ := e.Process(append(slices.Clone(conformance.StallProof), mongolock.WithOwner("holder"), trace)...)
	taker, _ := e.Process(append(slices.Clone(conformance.StallProof), mongolock.WithOwner("taker"))...)
	takeOver := func(old *mongolock.Handle) *mongolock.Handle {
		t.Helper()
		h, err := taker.TakeOver(ctx, mongolock.UntrackedTicket(old))
		require.NoError(t, err)
		require.False(t, closedNow(old.Lost()), "told, though not of this program")
		return h
	}

	old := k.take(t, slow)
	h := takeOver(old)
	require.NoError(t, old.Release(ctx), "the Release of a handle taken over, before its next extension")
	require.True(t, closedNow(old.Lost()), "taken over, and Lost not closed")
	requireTakenOver(t, old)
	require.NoError(t, old.Release(ctx), "a second Release")
	requireHeldBy(t, slow, h, k.write) // the old holder's Release freed nothing
	require.NoError(t, h.Release(ctx))

	old = k.take(t, quick)
	h = takeOver(old)
	select {
	case <-old.Lost():
	case <-ctx.Done():
		t.Fatal("not lost at the next extension")
	}
	requireTakenOver(t, old)
	require.NoError(t, old.Release(ctx), "the Release of a handle taken over, after its extension saw it")
	require.NoError(t, h.Release(ctx))

	mu.Lock()
	require.Len(t, losses, 2)
	for _, l := range losses {
		require.Equal(t, "taken_over", l.Reason)
		require.ErrorIs(t, l.Err, mongolock.ErrTakenOver)
	}
	mu.Unlock()

	// Lost otherwise, where the document records the take-overs above.
	old = k.take(t, slow)
	ended, err := taker.ForceRelease(ctx, old.Name())
	require.NoError(t, err)
	require.True(t, ended)
	err = old.Release(ctx)
	require.ErrorIs(t, err, mongolock.ErrLockLost)
	require.NotErrorIs(t, err, mongolock.ErrTakenOver)
	require.NotErrorIs(t, context.Cause(old.Context()), mongolock.ErrTakenOver)
}

// A ticket works once. A ticket whose acquisition was taken over, released,
// lost or ran out is ErrStaleTicket and leaves the document as it was.
func TestAStaleTicketChangesNothing(t *testing.T) {
	for _, end := range []struct {
		name string
		end  func(t *testing.T, d *memDB, h *mongolock.Handle, ticket string)
	}{
		{"taken over already", func(t *testing.T, d *memDB, h *mongolock.Handle, ticket string) {
			p, _ := d.process()
			releaseAtCleanup(t, must(p.TakeOver(t.Context(), ticket)))
		}},
		{"released", func(t *testing.T, d *memDB, h *mongolock.Handle, ticket string) {
			require.NoError(t, h.Release(t.Context()))
		}},
		{"lost", func(t *testing.T, d *memDB, h *mongolock.Handle, ticket string) {
			p, _ := d.process()
			ended, err := p.ForceRelease(t.Context(), "x")
			require.NoError(t, err)
			require.True(t, ended)
		}},
		{"run out", func(t *testing.T, d *memDB, h *mongolock.Handle, ticket string) {
			<-h.Lost() // its network partitioned: no extension succeeds
			time.Sleep(memExpiry)
		}},
	} {
		for _, k := range []string{"lock", "semaphore slot"} {
			t.Run(end.name+"/"+k, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					d := newMemDB(t)
					p, net := d.process(mongolock.WithExpiry(memExpiry))
					taker, _ := d.process()
					var h *mongolock.Handle
					coll := mongolock.DefaultCollection
					if k == "lock" {
						h = mustTryAcquire(t, t.Context(), p.Lock("x"))
					} else {
						h, coll = must(p.Semaphore("x", 1).TryAcquire(t.Context())), memSemColl
					}
					releaseAtCleanup(t, h)
					ticket, err := h.Ticket()
					require.NoError(t, err)
					if end.name == "run out" {
						net.Partition()
					}
					end.end(t, d, h, ticket)
					before := d.doc(coll, "x")
					_, err = taker.TakeOver(t.Context(), ticket)
					require.ErrorIs(t, err, mongolock.ErrStaleTicket)
					requireError(t, err, "take over", "x")
					require.True(t, bytes.Equal(before, d.doc(coll, "x")), "a stale ticket changed the document:\n%v\n%v", before, d.doc(coll, "x"))
				})
			})
		}
	}
}

// requireError checks that err is an *Error of op and name.
func requireError(t *testing.T, err error, op, name string) {
	t.Helper()
	me, ok := err.(*mongolock.Error)
	require.True(t, ok, "%T: %v", err, err)
	require.Equal(t, op, me.Op)
	require.Equal(t, name, me.Name)
}

// acquired is an Acquire's outcome, from a goroutine.
type acquired struct {
	h   *mongolock.Handle
	err error
}

// start runs acquire in a goroutine; its outcome arrives on the channel.
func start(acquire func() (*mongolock.Handle, error)) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		h, err := acquire()
		ch <- acquired{h, err}
	}()
	return ch
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Waiters keep their place: a process that claims the next turn while the
// lock changes hands by ticket gets it at the taker's release, before a
// waiter of the taker's own process. (An RWLock's writer is taken over
// while a reader claims.)
func TestTakeOverKeepsTheClaimantNext(t *testing.T) {
	for _, k := range []string{"lock", "semaphore slot", "rwlock"} {
		t.Run(k, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := boundedCtx(t, time.Minute) // of the bubble's time
				d := newMemDB(t)
				holder, _ := d.process(mongolock.WithExpiry(memExpiry))
				taker, _ := d.process(mongolock.WithExpiry(memExpiry))
				claimant, _ := d.process(mongolock.WithExpiry(memExpiry))
				lock := func(p *mongolock.Provider) func() (*mongolock.Handle, error) {
					l := map[string]*mongolock.Lock{"lock": p.Lock("x"), "rwlock": p.RWLock("x").Writer()}[k]
					if l == nil {
						return func() (*mongolock.Handle, error) { return p.Semaphore("x", 1).Acquire(ctx) }
					}
					if k == "rwlock" && p == claimant {
						l = p.RWLock("x").Reader()
					}
					return func() (*mongolock.Handle, error) { return l.Acquire(ctx) }
				}
				old := releaseAtCleanup(t, must(lock(holder)()))
				claimed := start(lock(claimant))
				synctest.Wait()
				coll := mongolock.DefaultCollection
				if k != "lock" {
					coll = memSemColl
				}
				claim := d.doc(coll, "x").Lookup("waitingProcess").StringValue()
				require.NotEmpty(t, claim, "the claimant claims nothing")

				h := must(taker.TakeOver(ctx, must(old.Ticket())))
				require.Equal(t, claim, d.doc(coll, "x").Lookup("waitingProcess").StringValue(), "the claim moved")
				local := start(lock(taker))
				synctest.Wait()
				require.NoError(t, h.Release(ctx))
				var next acquired
				select {
				case next = <-claimed:
				case l := <-local:
					require.NoError(t, l.err)
					require.NoError(t, l.h.Release(ctx))
					t.Fatal("the taker's own waiter got in before the claimant")
				}
				require.NoError(t, next.err)
				require.Greater(t, next.h.FencingToken(), h.FencingToken())
				require.NoError(t, next.h.Release(ctx))
				l := <-local
				require.NoError(t, l.err)
				require.NoError(t, l.h.Release(ctx))
			})
		})
	}
}

// A successor takes leadership over with its own value: observers see the
// old leader, then the new, and never nobody.
func TestElectionTakeOverLeavesNoGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		old, _ := d.process(mongolock.WithOwner("v1"), mongolock.WithExpiry(memExpiry))
		next, _ := d.process(mongolock.WithOwner("v2"), mongolock.WithExpiry(memExpiry))
		watcher, _ := d.process()
		oldLead := must(old.Election("e").Campaign(ctx, "http://v1"))
		releaseAtCleanup(t, oldLead.Handle)
		octx, stop := context.WithCancel(ctx)
		defer stop()
		seen := watcher.Election("e").Observe(octx)
		require.Equal(t, "http://v1", (<-seen).Value)

		lead, err := next.Election("e").TakeOver(ctx, must(oldLead.Ticket()), "http://v2")
		require.NoError(t, err)
		releaseAtCleanup(t, lead.Handle)
		require.True(t, closedNow(oldLead.Lost()))
		got := <-seen
		require.Equal(t, mongolock.Leader{Value: "http://v2", Owner: "v2", FencingToken: lead.FencingToken(), Since: lead.AcquiredAt()}, got)
		require.Greater(t, got.FencingToken, oldLead.FencingToken())
		require.ErrorIs(t, oldLead.Proclaim(ctx, "http://v1/again"), mongolock.ErrLockLost)
		require.NoError(t, lead.Proclaim(ctx, "http://v2/b"))
		require.Equal(t, "http://v2/b", (<-seen).Value)

		_, err = next.Election("other").TakeOver(ctx, must(lead.Ticket()), "v")
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
		_, err = next.Election("e").TakeOver(ctx, must(lead.Ticket()), strings.Repeat("v", mongolock.MaxValueLen+1))
		require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
		require.False(t, closedNow(lead.Lost()), "a refused take-over took it")
	})
}

// A Release that would hand the lock over to an Acquire of its process,
// of an acquisition taken over in another program, offers it (the
// hand-over matches nothing), learns that it was taken over, and returns
// nil; the Acquire goes on waiting, and gets the lock at the taker's
// release. A lock and a semaphore's one slot, over the model and the
// server.
func TestAHandOverOfWhatWasTakenOverElsewhereReturnsNil(t *testing.T) {
	type acquirer interface {
		TryAcquire(ctx context.Context) (*mongolock.Handle, error)
		Acquire(ctx context.Context) (*mongolock.Handle, error)
	}
	for _, k := range []struct {
		name string
		of   func(p *mongolock.Provider) acquirer
	}{
		{"lock", func(p *mongolock.Provider) acquirer { return p.Lock("x") }},
		{"semaphore", func(p *mongolock.Provider) acquirer { return p.Semaphore("x", 1) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			conformance.Over(t, func(e *conformance.Env) {
				t, ctx := e.T, e.Ctx
				waiting, offered := make(chan struct{}), make(chan bool, 1)
				trace := mongolock.WithTrace(&mongolock.Trace{
					Waiting: func(i mongolock.WaitingInfo) {
						if i.Waiting && i.Count == 1 {
							close(waiting)
						}
					},
					HandOver: func(_ context.Context, i mongolock.HandOverInfo) { offered <- i.HandedOver },
				})
				// A lease of a minute: its next extension comes after the test.
				holder, _ := e.Process(mongolock.WithExpiry(time.Minute), trace)
				taker, _ := e.Process(conformance.StallProof...)
				old := must(k.of(holder).TryAcquire(ctx))
				h, err := taker.TakeOver(ctx, mongolock.UntrackedTicket(old))
				require.NoError(t, err)
				next := start(func() (*mongolock.Handle, error) { return k.of(holder).Acquire(ctx) })
				select {
				case <-waiting:
				case <-ctx.Done():
					t.Fatal("the Acquire did not wait")
				}

				require.NoError(t, old.Release(ctx), "the Release of a handle taken over, offering a hand-over")
				require.False(t, <-offered, "handed over what the taker holds")
				requireTakenOver(t, old)
				require.NoError(t, h.Release(ctx))
				got := <-next
				require.NoError(t, got.err)
				require.Greater(t, got.h.FencingToken(), h.FencingToken())
				require.NoError(t, got.h.Release(ctx))
			})
		})
	}
}

// A leader taken over in another program that proclaims before its next
// extension learns there that it was taken over: the proclamation fails
// with ErrTakenOver, an ErrLockLost, and its Release returns nil. Over the
// model and the server.
func TestAProclamationAfterATakeOverElsewhereSaysTakenOver(t *testing.T) {
	conformance.Over(t, func(e *conformance.Env) {
		t, ctx := e.T, e.Ctx
		// A lease of a minute: its next extension comes after the test.
		old, _ := e.Process(mongolock.WithOwner("v1"), mongolock.WithExpiry(time.Minute))
		next, _ := e.Process(append(slices.Clone(conformance.StallProof), mongolock.WithOwner("v2"))...)
		oldLead := must(old.Election("e").Campaign(ctx, "http://v1"))
		lead, err := next.Election("e").TakeOver(ctx, mongolock.UntrackedTicket(oldLead.Handle), "http://v2")
		require.NoError(t, err)
		require.False(t, closedNow(oldLead.Lost()), "told, though not of this program")

		err = oldLead.Proclaim(ctx, "http://v1/again")
		require.ErrorIs(t, err, mongolock.ErrTakenOver)
		require.ErrorIs(t, err, mongolock.ErrLockLost)
		require.True(t, closedNow(oldLead.Lost()))
		requireTakenOver(t, oldLead.Handle)
		require.NoError(t, oldLead.Release(ctx), "the Release of a leadership taken over")
		require.NoError(t, lead.Proclaim(ctx, "http://v2/b"))
		require.NoError(t, lead.Release(ctx))
	})
}

// An upgradeable reader taken over in another program that upgrades, or
// downgrades, before its next extension learns of the hand-off there: its
// loss says taken over, and its Release returns nil.
func TestAnUpgradeOrDowngradeAfterATakeOverElsewhereSaysTakenOver(t *testing.T) {
	for _, switchMode := range []string{"upgrade", "downgrade"} {
		t.Run(switchMode, func(t *testing.T) {
			conformance.Over(t, func(e *conformance.Env) {
				t, ctx := e.T, e.Ctx
				// A lease of a minute: its next extension comes after the test.
				old, _ := e.Process(mongolock.WithOwner("v1"), mongolock.WithExpiry(time.Minute))
				next, _ := e.Process(append(slices.Clone(conformance.StallProof), mongolock.WithOwner("v2"))...)
				h := must(old.RWLock("rw").Upgradeable().Acquire(ctx))
				if switchMode == "downgrade" {
					require.NoError(t, h.Upgrade(ctx))
				}
				taker, err := next.TakeOver(ctx, mongolock.UntrackedTicket(h.Handle))
				require.NoError(t, err)
				require.False(t, closedNow(h.Lost()), "told, though not of this program")

				if switchMode == "upgrade" {
					err = h.Upgrade(ctx)
				} else {
					err = h.Downgrade(ctx)
				}
				require.ErrorIs(t, err, mongolock.ErrTakenOver)
				require.ErrorIs(t, err, mongolock.ErrLockLost)
				require.True(t, closedNow(h.Lost()))
				requireTakenOver(t, h.Handle)
				require.NoError(t, h.Release(ctx), "the Release of an upgradeable reader taken over")
				require.NoError(t, taker.Release(ctx))
			})
		})
	}
}

// What is not a ticket of the provider's database and collection sends
// nothing.
func TestTakeOverOfWhatIsNoTicketSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		p, net := d.process()
		other, _ := d.process(mongolock.WithCollection("other"))
		h := releaseAtCleanup(t, mustTryAcquire(t, ctx, p.Lock("x")))
		ticket := must(h.Ticket())
		net.Partition() // anything sent fails otherwise
		for _, bad := range []string{"", "x", ticket[:len(ticket)-2], "mlt9_" + ticket[5:]} {
			_, err := p.TakeOver(ctx, bad)
			requireInvalid(t, err, "take over")
		}
		_, err := other.TakeOver(ctx, ticket)
		requireInvalid(t, err, "take over")
		elsewhere, err := backend.NewProvider(memdb.NewStore("another", nil).Client(), "another", []mongolock.Option(nil))
		require.NoError(t, err)
		defer elsewhere.(*mongolock.Provider).Close(ctx)
		_, err = elsewhere.(*mongolock.Provider).TakeOver(ctx, ticket)
		requireInvalid(t, err, "take over")
		net.Heal()
		require.False(t, closedNow(h.Lost()))
	})
}

// ticketErrorCases are errorCases' rows of Handle.Ticket and the
// take-overs.
func ticketErrorCases() []errorCase {
	var noCtx context.Context
	inv, stale := []error{mongolock.ErrInvalidArgument}, []error{mongolock.ErrStaleTicket}
	// ticketOf is the ticket of a lock "x" of e.p that is held (hold), or
	// was released.
	ticketOf := func(t *testing.T, e *errorEnv, hold bool) string {
		h := e.hold(t, e.p.Lock("x"))
		ticket := must(h.Ticket())
		if !hold {
			require.NoError(t, h.Release(e.ctx))
		}
		return ticket
	}
	leaderTicket := func(t *testing.T, e *errorEnv) string { return must(lead(t, e).Ticket()) }
	return []errorCase{
		{call: "Handle.Ticket", path: "a released handle", op: "ticket", name: "x", is: []error{mongolock.ErrReleased}, run: func(t *testing.T, e *errorEnv) error {
			h := e.hold(t, e.p.Lock("x"))
			require.NoError(t, h.Release(e.ctx))
			_, err := h.Ticket()
			return err
		}},
		{call: "Handle.Ticket", path: "a lost handle", op: "ticket", name: "x", is: []error{mongolock.ErrLockLost}, run: func(t *testing.T, e *errorEnv) error {
			h := e.hold(t, e.p.Lock("x"))
			_, err := e.rival.ForceRelease(e.ctx, "x")
			require.NoError(t, err)
			<-h.Lost()
			_, err = h.Ticket()
			return err
		}},
		{call: "Provider.TakeOver", path: "a nil context", op: "take over", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.TakeOver(noCtx, ticketOf(t, e, true))
			return err
		}},
		{call: "Provider.TakeOver", path: "no ticket", op: "take over", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.TakeOver(e.ctx, "mlt1_x")
			return err
		}},
		{call: "Provider.TakeOver", path: "a ticket of another collection", op: "take over", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.provider(t, e.net, mongolock.WithCollection("other")).TakeOver(e.ctx, ticketOf(t, e, true))
			return err
		}},
		{call: "Provider.TakeOver", path: "a provider that holds, of an election's ticket", op: "take over", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.provider(t, e.net, mongolock.WithHoldAtLeast(time.Second)).TakeOver(e.ctx, leaderTicket(t, e))
			return err
		}},
		{call: "Provider.TakeOver", path: "a stale ticket", op: "take over", name: "x", is: stale, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.TakeOver(e.ctx, ticketOf(t, e, false))
			return err
		}},
		{call: "Provider.TakeOver", path: "a closed provider", op: "take over", name: "x", is: []error{mongolock.ErrClosed}, run: func(t *testing.T, e *errorEnv) error {
			ticket := ticketOf(t, e, true)
			require.NoError(t, e.rival.Close(e.ctx))
			_, err := e.rival.TakeOver(e.ctx, ticket)
			return err
		}},
		{call: "Provider.TakeOver", path: "the server unreachable", op: "take over", name: "x", run: func(t *testing.T, e *errorEnv) error {
			ticket := ticketOf(t, e, true)
			e.net.Faults.Partition()
			_, err := e.p.TakeOver(e.ctx, ticket)
			return err
		}},
		{call: "Election.TakeOver", path: "no ticket", op: "take over", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.Election("e").TakeOver(e.ctx, "", "v")
			return err
		}},
		{call: "Election.TakeOver", path: "a ticket of another name", op: "take over", name: "f", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.Election("f").TakeOver(e.ctx, leaderTicket(t, e), "v")
			return err
		}},
		{call: "Election.TakeOver", path: "a lock's ticket", op: "take over", name: "x", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.Election("x").TakeOver(e.ctx, ticketOf(t, e, true), "v")
			return err
		}},
		{call: "Election.TakeOver", path: "a value too long", op: "take over", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.Election("e").TakeOver(e.ctx, leaderTicket(t, e), strings.Repeat("v", mongolock.MaxValueLen+1))
			return err
		}},
		{call: "Election.TakeOver", path: "a nil context", op: "take over", name: "e", is: inv, run: func(t *testing.T, e *errorEnv) error {
			_, err := e.rival.Election("e").TakeOver(noCtx, leaderTicket(t, e), "v")
			return err
		}},
		{call: "Election.TakeOver", path: "a stale ticket", op: "take over", name: "e", is: stale, run: func(t *testing.T, e *errorEnv) error {
			l := lead(t, e)
			ticket := must(l.Ticket())
			require.NoError(t, l.Release(e.ctx))
			_, err := e.rival.Election("e").TakeOver(e.ctx, ticket, "v")
			return err
		}},
	}
}

// A take-over whose caller gets no handle (its ctx ended while the
// statement was on its way, or the reply was lost) leaves nothing held:
// what it may have taken is released in the background, and the holder,
// whose acquisition it took, is lost.
func TestAFailedTakeOverLeavesNothingHeld(t *testing.T) {
	for _, fault := range []struct {
		name string
		set  func(net *memdb.Faults)
	}{
		{"ctx ended on the way", func(net *memdb.Faults) { net.Delay(time.Second) }},
		{"reply lost", func(net *memdb.Faults) { net.LoseReplies(1) }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newMemDB(t)
				holder, _ := d.process(mongolock.WithExpiry(memExpiry))
				taker, net := d.process() // a lease of 30 s: it must be released
				old := releaseAtCleanup(t, mustTryAcquire(t, t.Context(), holder.Lock("x")))
				ticket := must(old.Ticket())
				// The taker has checked the collection: the fault meets the
				// take-over's statement.
				require.NoError(t, mustTryAcquire(t, t.Context(), taker.Lock("y")).Release(t.Context()))
				fault.set(net)
				_, err := taker.TakeOver(boundedCtx(t, 100*time.Millisecond), ticket)
				require.Error(t, err)
				net.Delay(0)
				time.Sleep(1500 * time.Millisecond) // the reply, the background release, the holder's next extension
				synctest.Wait()
				require.True(t, closedNow(old.Lost()), "the holder of what was taken over still holds")
				h, err := holder.Lock("x").TryAcquire(t.Context())
				require.NoError(t, err, "what the failed take-over took is held")
				require.NoError(t, h.Release(t.Context()))
			})
		})
	}
}

// Nobody gets in between: a rival that tries all along, while a lock and
// an RWLock's writer change hands by ticket, is refused every time.
func TestNobodyGetsInDuringATakeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := newMemDB(t)
		holder, _ := d.process(mongolock.WithExpiry(memExpiry))
		taker, _ := d.process(mongolock.WithExpiry(memExpiry))
		rival, _ := d.process(mongolock.WithExpiry(memExpiry))
		locks := func(p *mongolock.Provider) []*mongolock.Lock {
			return []*mongolock.Lock{p.Lock("x"), p.RWLock("x").Writer(), p.RWLock("x").Reader()}
		}
		var hs []*mongolock.Handle
		for _, l := range locks(holder)[:2] {
			hs = append(hs, releaseAtCleanup(t, mustTryAcquire(t, ctx, l)))
		}
		stop := make(chan struct{})
		got := make(chan error, 1)
		go func() {
			for {
				for _, l := range locks(rival) {
					if h, err := l.TryAcquire(ctx); err == nil {
						_ = h.Release(ctx)
						got <- fmt.Errorf("the rival got %s in", h.Name())
						return
					}
				}
				select {
				case <-stop:
					got <- nil
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		for range 3 { // back and forth
			for i, h := range hs {
				hs[i] = releaseAtCleanup(t, must(taker.TakeOver(ctx, must(h.Ticket()))))
				time.Sleep(time.Millisecond)
			}
			holder, taker = taker, holder
		}
		close(stop)
		require.NoError(t, <-got)
	})
}
