package mongolock

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// attempt is one acquisition attempt, claiming with waitToken (Acquire):
// one round trip on an existing lock document. A missing document (no
// match; or a duplicate key on FerretDB, racing another client that creates
// it) is created with a plain insert and the attempt repeated.
func (l *Lock) attempt(ctx context.Context, mode attemptMode, waitToken int64) (*Handle, reply, error) {
	if err := l.p.ensureCollection(ctx, l.collection()); err != nil {
		return nil, reply{}, err // a done ctx's: nothing sent, not even the index
	}
	l.p.ensureIndex(l.collection())
	for tries := 1; ; tries++ {
		// A fresh lockId per round trip: a cleanup of one can never free
		// another.
		lockID, sent := newLockID(), l.p.leases.now()
		doc, err := l.acquireRoundTrip(ctx, attempt{id: lockID, waitToken: waitToken, mode: mode})
		switch {
		case err == nil && doc.LockID == lockID:
			return newHandle(l, lockID, doc, sent), doc, nil
		case err == nil && doc.wrong != nil:
			return nil, doc, doc.wrong
		case err == nil:
			return nil, doc, ErrNotAcquired
		case !isNoMatch(err) && !isDuplicateKey(err):
			return nil, doc, err
		case tries == maxCreateTries:
			// The document keeps vanishing, or others keep racing to
			// create it: contention, not failure.
			return nil, doc, fmt.Errorf("%w (the lock document was created and removed concurrently: %w)", ErrNotAcquired, err)
		}
		if err := l.collection().store.insertOne(ctx, l.kind.create(l.name)); err != nil && !isDuplicateKey(err) {
			return nil, reply{}, err
		}
	}
}

// acquireRoundTrip sends one acquisition of l, or a hand-over from the
// acquisition releasing, and waits for its reply, for ctx, or for the
// provider to close (ErrClosed), as roundTrip: an acquisition whose reply
// nobody waits for any more is released, a claim it made is withdrawn. A
// request that fails ambiguously (the connection dropped after sending, a
// write concern error) is released in the background too.
func (l *Lock) acquireRoundTrip(ctx context.Context, a attempt) (reply, error) {
	p, lc, lockID := l.p, l.collection(), a.id
	send := func(ctx context.Context) (reply, error) {
		testHookSend(p, a.mode)
		doc, err := l.kind.acquire(ctx, p, l.name, a)
		if err = testHookReply(p, err); isAmbiguous(err) {
			l.releaseOrphan(lockID, undoSchedule(err))
		}
		return doc, err
	}
	return roundTrip(ctx, p, send, func(doc reply, err error) {
		switch {
		case err == nil && doc.LockID == lockID:
			l.releaseOrphan(lockID, afterReply)
		case err == nil && a.mode == waitMode && doc.placed(lc.process):
			l.withdraw()
		}
	})
}

// roundTrip sends one request with send and waits for its reply, for ctx,
// or for p to close (ErrClosed).
//
// If ctx ends (or p closes) first, the request may already be on the
// server, and an undo sent now could overtake it there: so the request is
// left to finish in the background (for at most cleanupTimeout
// more), and undo is called with its outcome once it is in.
func roundTrip[T any](ctx context.Context, p *Provider, send func(context.Context) (T, error), undo func(T, error)) (T, error) {
	var none T
	if err := ctx.Err(); err != nil {
		return none, err
	}
	if ctx.Done() == nil { // ctx cannot end it (Close waits for it): no need for a goroutine
		return send(ctx)
	}
	type result struct {
		v   T
		err error
	}
	replied := make(chan result) // unbuffered: the reply is taken, or abandoned
	abandoned := make(chan struct{})
	opCtx, cancelOp := context.WithCancel(context.WithoutCancel(ctx))
	p.sendAsync(func() {
		defer cancelOp()
		var r result
		r.v, r.err = send(opCtx)
		select {
		case replied <- r:
		case <-abandoned: // nobody takes the reply: undo what it did
			undo(r.v, r.err)
		}
	})
	select {
	case r := <-replied:
		return r.v, r.err
	case <-ctx.Done():
	case <-p.done:
	}
	close(abandoned)
	time.AfterFunc(cleanupTimeout, cancelOp)
	return none, cmp.Or(ctx.Err(), ErrClosed)
}
