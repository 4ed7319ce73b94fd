package mongolock

import (
	"context"
	"encoding/base64"
	"strings"
	"sync"
	"time"

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

// A ticket's contents: what a taker needs of an acquisition. Its encoding is
// ticketPrefix, then the BSON document, base64url without padding: the
// prefix carries the format's version, and lets a secret scanner find a
// ticket that leaked.
type ticketContents struct {
	Kind       Kind   `bson:"k"`
	Database   string `bson:"d"`
	Collection string `bson:"c"` // the provider's collection (WithCollection)
	Name       string `bson:"n"`
	ID         string `bson:"i"`           // the acquisition's lockId, a slot's holder id
	Mode       string `bson:"m,omitempty"` // an RWLock's: the mode of its Lock (Reader, Writer, Upgradeable)
	// A semaphore's n and the acquisition's units: the taker's Lock is
	// of them, and its telemetry names them from the take-over's start.
	Slots int `bson:"s,omitempty"`
	Units int `bson:"u,omitempty"`
}

const ticketPrefix = "mlt1_"

// errTicket reports a string that is not a ticket of this library's.
var errTicket error = invalid("malformed ticket: not one that Handle.Ticket made")

func (t ticketContents) encode() string {
	return ticketPrefix + base64.RawURLEncoding.EncodeToString(mustMarshal(bson.D{
		{Key: "k", Value: t.Kind}, {Key: "d", Value: t.Database}, {Key: "c", Value: t.Collection}, {Key: "n", Value: t.Name},
		{Key: "i", Value: t.ID}, {Key: "m", Value: t.Mode}, {Key: "s", Value: t.Slots}, {Key: "u", Value: t.Units}}))
}

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

// ticketed are this program's acquisitions that made a ticket, by lockId,
// until they end: a take-over in this program tells the one it took at
// once.
var ticketed sync.Map // lockId -> *acquisition

// Ticket returns a ticket of h's acquisition: a string that any process
// passes to Provider.TakeOver (or Election.TakeOver) to take it over with
// no moment in which anyone else could get in; an error if h has ended.
//
// The take-over is one owner-checked round trip. The ticket is
// URL-safe, so a file, an HTTP header or an environment variable carries it
// as it is, and opaque: its format is the library's, and a later one will
// be told apart from this one.
//
// A ticket is a bearer credential for this one acquisition: whoever
// presents it takes the acquisition from h while h holds it, with a
// connection of its own to the database. Pass it as a secret, and only to
// the process that is to take over. It grants nothing else (no access to
// the database), and nothing once the acquisition has ended: released,
// lost, run out, or taken over already, as a ticket works once.
//
// Making a ticket sends nothing: h holds as before until it is taken over,
// released or lost. Taken over, h is lost (Lost closes, Context ends with
// ErrTakenOver, which is an ErrLockLost): at once if the taker runs in
// this program, else at h's next extension, within the extension cadence;
// h's Release then frees nothing and returns nil, as the hand-off was
// chosen. So stop the work the lock protects before passing the ticket:
// the taker's fencing token outranks h's, and a fenced write of h's is
// refused once the taker has written. A released handle, or one known
// lost, has no ticket: Ticket returns an error, wrapping ErrLockLost if it
// was lost.
func (h *Handle) Ticket() (string, error) {
	a := h.held()
	if a == nil {
		return "", &Error{Op: "ticket", Err: errNilHandle}
	}
	if a.released.Load() {
		return "", a.lock.errorf("ticket", errReleased)
	}
	if err := a.knownLost(); err != nil {
		return "", a.lock.errorf("ticket", err)
	}
	if _, loaded := ticketed.LoadOrStore(a.lockID, a); !loaded {
		context.AfterFunc(a.ctx, func() { ticketed.CompareAndDelete(a.lockID, a) })
	}
	return a.ticketContents().encode(), nil
}

// ticketContents is what a's ticket says.
func (a *acquisition) ticketContents() ticketContents {
	k, lc := a.lock.kind.describe(), a.lock.p.locks
	t := ticketContents{Kind: k.kind, Database: lc.db, Collection: lc.name, Name: a.lock.name, ID: a.lockID, Slots: k.slots, Units: k.units}
	if k.mode != 0 {
		t.Mode = string(k.mode)
	}
	return t
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
	id, sent := newLockID(), p.now()
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
		l.collection().queues.setExclusive(h.acquisition, r.mode == writeMode)
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
		k = unitsDriver{semDriver{t.Slots}, t.Units}
	case KindRWLock:
		k = rwDriver{semDriver{1}, rwMode(t.Mode[0])}
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
	if a := v.(*acquisition); a.lock.p.forget(a) != nil {
		a.markLost(lossTakenOver, ErrTakenOver)
	}
}

// 27. Take over a lock's or an election's acquisition by its ticket:
// findOneAndUpdate(ownerFilter(name, the ticket's lockId),
// takeOverPipeline, returnDocument: after). While the acquisition is live
// (expiresAt after $$NOW), it is the taker's: the fields an acquisition
// writes, with a fresh lockId, lease and owner, the next fencing token, and
// value if given (an election's successor's), else the value it had; and
// takenOverLockId, the lockId it took (which stays until the next
// take-over), for the old holder to tell a hand-off from a loss. Its
// process is the last (lastProcess, lastLockId), at the end of a turn
// (processStreak at least turn): a live claim of another process is met at
// its release. Claims and places as next stay. An acquisition that is not
// live is left as it is. One expression, as (2a).
func takeOverPipeline(proc, owner string, expiry time.Duration, lockID string, value *string, turn int) bson.A {
	v := any("$value") // missing stays missing: an object leaves it out
	if value != nil {
		v = literal(*value)
	}
	fields := acquiredFields(proc, owner, expiry, lockID, v, true)
	for i, f := range fields {
		if f.Key == "processStreak" {
			fields[i].Value = op("$max", op("$add", ifNull("$processStreak", 0), 1), turn)
		}
	}
	fields = append(fields, bson.E{Key: "takenOverLockId", Value: "$lockId"}) // the filter's: the ticket's
	return bson.A{obj("$replaceWith", cond(future("$expiresAt"), op("$mergeObjects", "$$ROOT", fields), "$$ROOT"))}
}

// 28. Take over a slot of a semaphore or an RWLock by its ticket:
// findOneAndUpdate(semHolderFilter(name, taking), slotTakeOverPipeline,
// returnDocument: after, fields: takeOverReplyFields(id)). While holder
// taking is live, it is replaced with holder id, the taker's, in the same
// mode, with a fresh lease and the next fencing token, after the others,
// as an acquisition appends its holder; an upgrade's mark on it is
// dropped; its id is appended to takenOverIds, which keeps the last
// takenOverKept, for the old holder to tell a hand-off from a loss. The
// claim stays. A holder that is not live is left as it is.
func slotTakeOverPipeline(id, taking, owner string, expiry time.Duration) bson.A {
	const now, old = "$$NOW", "$_taken"
	until := op("$add", now, expiry.Milliseconds())
	holder := obj("id", id, "owner", literal(owner), "mode", "$$this.mode", "acquiredAt", now, "expiresAt", until, "token", nextToken)
	live := filterOf(ifNull("$holders", bson.A{}), op("$and", op("$eq", "$$this.id", taking), op("$gt", "$$this.expiresAt", now)))
	took := op("$gt", op("$size", old), 0)
	others := filterOf("$holders", op("$ne", "$$this.id", taking))
	return bson.A{set("_taken", live), set(
		"holders", cond(took, op("$concatArrays", others, obj("$map", obj("input", old, "in", holder))), "$holders"),
		"fencingToken", cond(took, nextToken, "$fencingToken"),
		"expiresAt", cond(took, op("$max", ifNull("$expiresAt", epoch), until), "$expiresAt"),
		"lastWrite", cond(took, wroteAcquire, "$lastWrite"),
		"takenOverIds", cond(took, op("$slice", op("$concatArrays", ifNull("$takenOverIds", bson.A{}), bson.A{literal(taking)}), -takenOverKept), "$takenOverIds"),
		"_taken", "$$REMOVE")}
}

// takenOverKept is how many of the slots taken over by ticket a document
// records: each old holder reads it at its next extension or release,
// within an extension cadence, and several take-overs may come meanwhile.
const takenOverKept = 32

// takeOverReplyFields return, of the document after a slot's take-over,
// its n (the ticket says it too) and the taker's holder, if it took one.
func takeOverReplyFields(id string) bson.D {
	return obj("n", 1, "holders", obj("$elemMatch", obj("id", id)))
}
