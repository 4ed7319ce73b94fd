package mongolock

import (
	"context"
	"encoding/base64"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Take-over by ticket.
//
// A holder makes a ticket of its acquisition (Handle.Ticket), and whoever
// presents it takes the acquisition over (Provider.TakeOver,
// Election.TakeOver) in one owner-checked statement that matches the
// acquisition only while its lease is live, by the server's clock, and
// makes it the taker's: a new lockId, lease and owner, and the next fencing
// token (27 for a lock's or an election's, 28 for a slot's). Claims and
// places as next stay where they are. The document records the lock id
// taken over, so that the old holder can tell a hand-off from a loss. The
// old handle is lost (ErrTakenOver): at once if it is of this program
// (ticketed), else when its next owner-checked write (an extension, its
// release) matches nothing and the holders statement finds that record.

// errTicket reports a string that is not a ticket of this library's.
var errTicket error = invalid("malformed ticket: not one that Handle.Ticket made")

// parseTicket decodes s, or returns errTicket.
func parseTicket(s string) (ticketContents, error) {
	var t ticketContents
	payload, ok := strings.CutPrefix(s, ticketPrefix)
	raw, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if !ok || err != nil || bson.Raw(raw).Validate() != nil || bson.Unmarshal(raw, &t) != nil {
		return ticketContents{}, errTicket
	}
	mode := t.Mode == "" // no mode but an RWLock's, which has one
	if t.Kind == KindRWLock {
		mode = len(t.Mode) == 1 && modeNames[rwMode(t.Mode[0])].mode != ""
	}
	switch {
	case !mode, t.Database == "", t.Collection == "", t.ID == "", t.Units < 0, t.Units > t.Slots, t.Slots > MaxSemaphoreSlots,
		(t.Units != 0) != (t.Kind == KindSemaphore), (t.Slots != 0) != (t.Kind == KindSemaphore),
		t.Kind != KindLock && t.Kind != KindElection && t.Kind != KindSemaphore && t.Kind != KindRWLock:
		return ticketContents{}, errTicket
	}
	return t, nil
}

// TakeOver takes over the acquisition of which ticket was made
// (Handle.Ticket), of any kind, and returns a Handle of that kind and mode
// held by p. A ticket whose acquisition has ended is ErrStaleTicket.
//
// A ticket may be of a lock, an election's leadership, a semaphore's slot,
// an RWLock's reader, upgradeable reader or writer (an upgraded or
// downgraded one as it is now). The Handle is a new acquisition in every way but that nobody
// could get in between, with a new lease, the owner of p (WithOwner), and
// a fencing token greater than every earlier one of the name. An election's
// value stays (Election.TakeOver gives it a new one).
//
// It takes one owner-checked round trip, bounded by ctx, and is not
// retried. The acquisition is taken only while it is live (its lease not
// ended by the server's clock); the ticket's holder is lost (see
// Handle.Ticket). Waiters keep their place: a process that claims the next
// turn of a lock gets it at the taker's release, as it would have at the
// holder's, and a take-over ends the turn of the taker's process. A ticket
// whose acquisition ended (released, lost, run out, taken over already) is
// ErrStaleTicket, and changes nothing. A string that is not a ticket, or a
// ticket of another database or collection than p's (WithCollection), is
// ErrInvalidArgument, and sends nothing. If the round trip fails, or ctx
// ends while it is on its way, what it may have taken is released in the
// background, as an Acquire's would be: the ticket's acquisition may be
// over then.
func (p *Provider) TakeOver(ctx context.Context, ticket string) (*Handle, error) {
	t, err := parseTicket(ticket)
	if err != nil {
		return nil, &Error{Op: "take over", Err: err}
	}
	return p.takeOver(ctx, t, nil)
}

// TakeOver makes the caller the leader of the election in the place of
// the leader that made ticket (Leadership's Ticket), with value, as
// Campaign would.
//
// It is the change of leader of a rolling deploy, in which the old
// leader passes its ticket to its successor, so that there is no moment
// without a leader, and never two. It is Provider.TakeOver of an
// election's ticket, with its errors; a ticket of another name or kind is
// ErrInvalidArgument.
func (e *Election) TakeOver(ctx context.Context, ticket, value string) (*Leadership, error) {
	t, err := parseTicket(ticket)
	switch {
	case err != nil:
	case t.Kind != KindElection || t.Name != e.lock.name:
		err = invalidf("the ticket is of the %s %q, not of this election", t.Kind, shortName(t.Name))
	default:
		err = checkValue(value)
	}
	if err != nil {
		return nil, e.lock.errorf("take over", err)
	}
	h, err := e.lock.p.takeOver(ctx, t, &value)
	if err != nil {
		return nil, err
	}
	return &Leadership{h}, nil
}

// takeOver takes t's acquisition over, with value if not nil (an
// election's).
func (p *Provider) takeOver(ctx context.Context, t ticketContents, value *string) (h *Handle, err error) {
	const op = "take over"
	l := t.lock(p)
	switch {
	case ctx == nil:
		return nil, l.errorf(op, errNilContext)
	case checkName(t.Name) != nil:
		return nil, l.errorf(op, errNameNotUTF8)
	case t.Database != p.locks.db || t.Collection != p.locks.name:
		return nil, l.errorf(op, invalidf("the ticket is of the collection %q of the database %q, the provider's is %q of %q",
			t.Collection, t.Database, p.locks.name, p.locks.db))
	}
	ctx, call := p.tel.startAcquire(ctx, l, opTakeOverTrace)
	defer func() { call.end(ctx, h, err) }()
	if !p.enter() {
		return nil, l.errorf(op, ErrClosed)
	}
	defer p.calls.Done()
	if p.opts.holdOptionSet() && !l.kind.holdsApply() {
		return nil, l.errorf(op, errHoldKind)
	}
	if err = p.ensureCollection(ctx, l.collection()); err == nil {
		p.ensureIndex(l.collection())
		h, err = l.takeOver(ctx, t, value, &call)
	}
	if err != nil {
		return nil, l.errorf(op, err)
	}
	return h, nil
}

// takeOver sends t's take-over by l's provider, counted by call, and
// returns the handle of what it took. A statement whose reply nobody takes,
// or that fails ambiguously, is undone as an acquisition's
// (acquireRoundTrip).
func (l *Lock) takeOver(ctx context.Context, t ticketContents, value *string, call *acquireCall) (*Handle, error) {
	p := l.p
	id, sent := newLockID(), p.leases.now()
	send := func(ctx context.Context) (takeOverReply, error) {
		r, err := t.send(ctx, p, id, value)
		if err == nil && r.LockID == id {
			t.tellTaken()
		}
		if isAmbiguous(err) {
			l.releaseOrphan(id, undoSchedule(err))
		}
		return r, err
	}
	r, err := roundTrip(ctx, p, send, func(r takeOverReply, err error) {
		if err == nil && r.LockID == id {
			l.releaseOrphan(id, afterReply)
		}
	})
	if isNoMatch(err) || err == nil && r.LockID != id {
		err = ErrStaleTicket
	}
	if err != nil {
		call.attempted(ctx, err)
		return nil, err
	}
	h := newHandle(l, id, r.reply, sent)
	if r.mode != 0 && r.mode != rwMode(h.mode.Load()) { // upgraded or downgraded
		h.mode.Store(uint32(r.mode))
		l.collection().lines.setExclusive(h.acquisition, r.mode == writeMode)
	}
	call.attempted(ctx, nil) // after Acquired, as an Acquire's
	return h, nil
}

// lock is p's Lock of t's name and kind; a semaphore's of the slots and
// units the ticket says, which are the document's while the ticket's
// holder is live (holders agree on n).
func (t ticketContents) lock(p *Provider) *Lock {
	var k kindDriver = lockDriver{}
	switch t.Kind {
	case KindElection:
		k = electionDriver{} // its value is only for campaigns to acquire with
	case KindSemaphore:
		k = semDriver{n: t.Slots, units: t.Units}
	case KindRWLock:
		k = rwDriver{semDriver{n: 1}, rwMode(t.Mode[0])}
	}
	return &Lock{p: p, name: t.Name, kind: k}
}

// takeOverReply is a take-over's reply: a lock's, and a slot's holder's
// mode (0: a lock's, or a semaphore's).
type takeOverReply struct {
	reply
	mode rwMode
}

// send sends the take-over of t by a new acquisition id, held with value
// if not nil: taken if the reply's LockID is id.
func (t ticketContents) send(ctx context.Context, p *Provider, id string, value *string) (takeOverReply, error) {
	var r takeOverReply
	if t.Kind == KindLock || t.Kind == KindElection {
		turn := turnLength
		if t.Kind == KindElection {
			turn = electionTurn
		}
		raw, err := p.locks.store.findOneAndUpdate(ctx, ownerFilter(t.Name, t.ID),
			takeOverPipeline(p.locks.process, p.opts.owner, p.opts.expiry, id, value, turn), nil)
		if err == nil {
			err = bson.Unmarshal(raw, &r.reply)
		}
		return r, err
	}
	var doc slotsDoc // the taker's holder only (takeOverReplyFields)
	raw, err := p.slots.store.findOneAndUpdate(ctx, semHolderFilter(t.Name, t.ID),
		slotTakeOverPipeline(id, t.ID, p.opts.owner, p.opts.expiry), takeOverReplyFields(id))
	if err == nil {
		err = bson.Unmarshal(raw, &doc)
	}
	if len(doc.Holders) == 1 {
		h := doc.Holders[0]
		r.LockID, r.FencingToken, r.AcquiredAt = h.ID, h.Token, h.AcquiredAt
		if t.Kind == KindRWLock && h.Mode != "" {
			r.mode = rwMode(h.Mode[0])
		}
	}
	return r, err
}

// tellTaken tells t's acquisition, if it is of this program, that it was
// taken over.
func (t ticketContents) tellTaken() {
	v, ok := ticketed.LoadAndDelete(t.ID)
	if !ok {
		return
	}
	if a := v.(*acquisition); a.lock.p.leases.forget(a) != nil {
		a.markLost(lossTakenOver, ErrTakenOver)
	}
}
