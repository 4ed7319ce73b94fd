package otelmongolock_test

// The spans and metrics over mongolocktest's store in process memory, in
// simulated time (testing/synctest): what needs no server.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/mongolocktest"
)

// A take-over is a span mongolock.take_over, a child of the caller's, and
// a duration and attempts of operation take_over, named by the ticket's
// lock: here a weighted semaphore's, with its slots and units, on the span
// and the metrics. The holder's loss counts with the reason taken_over. A
// stale ticket is an outcome of its own, stale_ticket: not an error, as
// not_acquired is not.
func TestATakeOverIsASpanAndAnAcquisitionDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newSDKTelemetry(t)
		store := mongolocktest.NewStore()
		holder, err := store.NewProvider(tel.options(nil)...)
		require.NoError(t, err)
		taker, err := store.NewProvider(tel.options(nil)...)
		require.NoError(t, err)
		old, err := holder.Semaphore("w", 4).Units(3).TryAcquire(ctx)
		require.NoError(t, err)
		ticket, err := old.Ticket()
		require.NoError(t, err)

		callerCtx, caller := tel.tp.Tracer("test").Start(ctx, "caller")
		h, err := taker.TakeOver(callerCtx, ticket)
		require.NoError(t, err)
		_, err = taker.TakeOver(callerCtx, ticket)
		require.ErrorIs(t, err, mongolock.ErrStaleTicket)
		caller.End()

		spans := tel.ended("mongolock.take_over")
		require.Len(t, spans, 2)
		took, stale := spans[0], spans[1]
		for _, s := range spans {
			require.Equal(t, caller.SpanContext().SpanID(), s.Parent().SpanID(), "the caller's span is the parent")
			require.Equal(t, "semaphore", spanAttr(t, s, "mongolock.kind").AsString())
			require.Equal(t, int64(4), spanAttr(t, s, "mongolock.semaphore.slots").AsInt64())
			require.Equal(t, int64(3), spanAttr(t, s, "mongolock.semaphore.units").AsInt64())
			require.Equal(t, int64(1), spanAttr(t, s, "mongolock.attempts").AsInt64())
			require.Equal(t, codes.Unset, s.Status().Code)
		}
		require.Equal(t, "acquired", spanAttr(t, took, "mongolock.outcome").AsString())
		require.Equal(t, h.FencingToken(), spanAttr(t, took, "mongolock.fencing_token").AsInt64())
		require.Equal(t, "stale_ticket", spanAttr(t, stale, "mongolock.outcome").AsString())
		_, hasType := lookupAttr(stale, "error.type")
		require.False(t, hasType, "a stale ticket is no error")
		require.Len(t, stale.Events(), 1, "its refused attempt")
		require.Contains(t, stale.Events()[0].Attributes, attribute.String("mongolock.outcome", "stale_ticket"))

		takeOver := []attribute.KeyValue{attribute.String("mongolock.operation", "take_over"),
			attribute.Int("mongolock.semaphore.slots", 4), attribute.Int("mongolock.semaphore.units", 3)}
		for _, outcome := range []string{"acquired", "stale_ticket"} {
			with := append(takeOver, attribute.String("mongolock.outcome", outcome))
			require.Equal(t, int64(1), tel.total(t, "mongolock.acquire.duration", with...), outcome)
			require.Equal(t, int64(1), tel.total(t, "mongolock.acquire.attempts", with...), outcome)
		}
		require.Equal(t, int64(1), tel.total(t, "mongolock.losses", attribute.String("mongolock.loss.reason", "taken_over"),
			attribute.Int("mongolock.semaphore.units", 3)))
		require.Equal(t, int64(2), tel.total(t, "mongolock.acquisitions", attribute.Int("mongolock.semaphore.units", 3)))
		require.Equal(t, int64(1), tel.total(t, "mongolock.handles.held", attribute.Int("mongolock.semaphore.units", 3)))

		require.NoError(t, h.Release(ctx))
		require.NoError(t, holder.Close(ctx))
		require.NoError(t, taker.Close(ctx))
	})
}

// A fleet's shards count up as their functions start and down as they
// stop; the stops count by reason, and a moved or left shard's drain is a
// duration.
func TestAFleetsShardsAreCountedRunningAndStoppedByReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel := newSDKTelemetry(t)
		store := mongolocktest.NewStore()
		p, err := store.NewProvider(tel.options(nil)...)
		require.NoError(t, err)
		other, err := store.NewProvider()
		require.NoError(t, err)
		work := func(ctx context.Context, _ mongolock.Shard) error { <-ctx.Done(); return nil }
		ctx, leave := context.WithCancel(t.Context())
		left := make(chan error, 1)
		go func() { left <- p.Fleet("f", 4).Run(ctx, work) }()
		synctest.Wait()
		require.Equal(t, int64(4), tel.total(t, "mongolock.fleet.shards.running"))

		octx, stop := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- other.Fleet("f", 4).Run(octx, work) }()
		for deadline := time.Now().Add(time.Minute); tel.total(t, "mongolock.fleet.shards.running") != 2; time.Sleep(100 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the traced worker moved 2 shards within a minute")
		}
		leave()
		require.ErrorIs(t, <-left, context.Canceled)
		require.Equal(t, int64(0), tel.total(t, "mongolock.fleet.shards.running"))
		for _, reason := range []string{"moved", "left"} {
			by := attribute.String("mongolock.fleet.stop.reason", reason)
			require.Equal(t, int64(2), tel.total(t, "mongolock.fleet.shards.stopped", by), reason)
			require.Equal(t, int64(2), tel.total(t, "mongolock.fleet.drain.duration", by), reason)
		}
		stop()
		require.ErrorIs(t, <-stopped, context.Canceled)
		require.NoError(t, p.Close(t.Context()))
		require.NoError(t, other.Close(t.Context()))
	})
}
