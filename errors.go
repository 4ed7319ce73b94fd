package mongolock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

var (
	// ErrMismatch reports that a name is held with another size or kind than
	// the call's, or that a handle is not in the mode a call needs. It is
	// returned at once, not retried, and the call leaves nothing behind.
	//
	// Another size or kind is a Semaphore's acquisition with another n than
	// its holders', or a Semaphore's name taken by an RWLock, or the other
	// way round. Another mode is an Upgrade of a handle that is not an
	// upgradeable reader's, a Downgrade of one that is not a writer's.
	ErrMismatch = errors.New("held with another size or kind")

	// ErrNotAcquired reports that the lock is held by someone else.
	//
	// TryAcquire returns it when its one attempt finds the lock held; Acquire
	// wraps it, together with ctx.Err(), when ctx ends while the lock was held
	// by someone else the whole time.
	ErrNotAcquired = errors.New("not acquired: held by another owner")

	// ErrLockLost reports that a lock was lost while held: its lease expired
	// before an extension succeeded, someone else took it over, or its
	// document was deleted.
	//
	// Handle.Context's cause, Release and Do report it; a take-over by ticket is ErrTakenOver, which is an ErrLockLost too,
	// and which Release does not report.
	ErrLockLost = errors.New("lock lost")

	// ErrInvalidArgument reports a bad argument. It is returned at once,
	// never retried, and the call sends nothing to the server.
	//
	// A bad argument is an option's value (New and NewProvider name the
	// option and the value), a database name MongoDB refuses, a nil
	// database, context or function, a Semaphore's n below 1, an election's
	// value longer than MaxValueLen, a name, prefix or value that is not
	// valid UTF-8, a call that needs a held handle on a nil one.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrClosed reports that the lock's Provider was closed.
	ErrClosed = errors.New("provider closed")

	// ErrNoLock reports that a lock, a Semaphore or an RWLock has no
	// document: it was never used, or its document was deleted a while
	// after its last release.
	ErrNoLock = errors.New("no such lock")

	// ErrNoLeader reports that nobody leads an election: its lock is free,
	// its last leader's lease ran out, or it was never held.
	ErrNoLeader = errors.New("no leader")

	// ErrFenced reports a fenced write refused because the document carries
	// a higher fencing token than the write's. Nothing was written.
	//
	// A holder acquired after the writer's acquisition has written it, so
	// the writer has lost its lock (whether or not it was told yet).
	ErrFenced = errors.New("fenced: the document carries a higher fencing token")

	// ErrCollation reports that a lock collection (the locks' or
	// <collection>_semaphores) was created with a default collation other
	// than the simple one. Nothing is sent to it; it is not retried.
	//
	// Its _id comparisons, and its _id index, follow that collation ("Job"
	// and "job" could be one lock), while names are promised to be compared
	// exactly, byte for byte. Create the collection without a collation (or
	// with {locale: "simple"}), or use another (WithCollection).
	ErrCollation = errors.New("the lock collection has a non-simple default collation")
)

// ErrReleased reports a call that needs a held handle on one that was
// released (Release, or its Provider's Close). Nothing is sent.
//
// Such calls are a fenced write, Ticket, Upgrade, Downgrade. A released
// handle was not lost: its holder gave the lock up, and errors.Is(err,
// ErrLockLost) is false.
var ErrReleased = errors.New("the handle was released")

// ErrStaleTicket reports a ticket (Handle.Ticket) whose acquisition is
// over: released, lost, run out, or taken over already (a ticket works
// once). TakeOver returns it having changed nothing.
var ErrStaleTicket = errors.New("stale ticket: the handle it was made for no longer holds")

// ErrTakenOver reports that a holder's acquisition was taken over by its
// ticket (Provider.TakeOver); errors.Is(ErrTakenOver, ErrLockLost) holds.
//
// A take-over is a hand-off by choice, which is a loss of the lock for the
// holder. It is the cause of the holder's Context, whose Release then
// returns nil.
var ErrTakenOver error = takenOver{}

type takenOver struct{}

func (takenOver) Error() string { return "lock lost: taken over by its ticket" }

func (takenOver) Is(target error) bool { return target == ErrLockLost }

// An invalid is an ErrInvalidArgument that says which argument and why.
type invalid string

func (i invalid) Error() string { return string(i) }

func (invalid) Is(target error) bool { return target == ErrInvalidArgument }

func invalidf(format string, args ...any) error { return invalid(fmt.Sprintf(format, args...)) }

// Server error codes that mean "try again" rather than "this request is
// wrong": the drivers' retryable-reads and retryable-writes
// specifications' list, 134 ReadConcernMajorityNotAvailableYet (a primary
// just elected), and 64 WriteConcernFailed, which neither has: the write
// may have applied, so the attempt is cleaned up as ambiguous
// (isAmbiguous) and the next one starts afresh.
var transientCodes = []int{6, 7, 64, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}

// postgresUnavailable are FerretDB's messages, under code 1
// (InternalError), for a request it could not pass on because its
// PostgreSQL is down, stopping or starting: PostgreSQL's own words for
// class 57 (operator intervention: "terminating connection due to
// administrator command", "the database system is starting up", "... is
// shutting down"), and pgx's when the connection is refused or cut under
// the request. MongoDB's InternalError (also code 1) says none of them.
var postgresUnavailable = []string{
	"terminating connection",
	"the database system is",
	"failed to connect to `",
	"failed to deallocate cached statement",
}

// isTransient reports whether err is worth retrying: the network, server
// selection, a timeout of the round trip, a server error of transientCodes
// or labelled retryable by the driver, or FerretDB's InternalError while
// its PostgreSQL is unavailable (postgresUnavailable). Any other code 1,
// MongoDB's InternalError among them, is a fault of the server: retried,
// it would hide that fault until ctx ends. Context cancellation is not
// transient: the caller asked to stop.
func isTransient(err error) bool {
	switch {
	case err == nil || errors.Is(err, context.Canceled) || isClosed(err):
		return false
	case mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.As(err, &topology.ServerSelectionError{}):
		return true
	}
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorLabel("RetryableWriteError") || se.HasErrorLabel("TransientTransactionError") ||
		slices.ContainsFunc(se.ErrorCodes(), func(c int) bool { return slices.Contains(transientCodes, c) }) ||
		slices.ContainsFunc(postgresUnavailable, func(m string) bool { return se.HasErrorCodeWithMessage(1, m) }))
}

// isClosed reports whether err says the client was disconnected: nothing
// sent through it will ever succeed.
func isClosed(err error) bool {
	return errors.Is(err, mongo.ErrClientDisconnected) || errors.Is(err, topology.ErrTopologyClosed)
}

// isDuplicateKey reports whether err is a duplicate key error: 11000 on
// MongoDB, code 1 with PostgreSQL's message on FerretDB/DocumentDB.
func isDuplicateKey(err error) bool {
	if mongo.IsDuplicateKeyError(err) {
		return true
	}
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorMessage("duplicate key value violates unique constraint")
}

// isNoMatch reports whether a findAndModify error means that its filter
// matched no document: no document (MongoDB), or FerretDB/DocumentDB's
// "The $$NOW operator cannot be used within this specific context", which it
// returns instead when a $$NOW pipeline matches no document.
func isNoMatch(err error) bool {
	var se mongo.ServerError
	return errors.Is(err, mongo.ErrNoDocuments) ||
		errors.As(err, &se) && se.HasErrorMessage("$$NOW operator cannot be used")
}

// endedByDeadline reports whether err was caused by ctx's deadline arriving
// (as opposed to a driver or network timeout): the driver refuses to send an
// operation that cannot finish before the deadline, or cuts its socket read
// at the deadline, slightly before ctx.Err() itself reports it.
func endedByDeadline(ctx context.Context, err error) bool {
	if _, ok := ctx.Deadline(); !ok {
		return false
	}
	var ce mongo.CommandError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ce) && ce.IsMaxTimeMSExpiredError()
}

// withServerErrors returns err, and beside it, where err is a failed server
// selection, each server's last error (a refused connection, a TLS
// handshake, an authentication): the driver keeps those in its topology
// description, out of the error chain, where errors.As would not find them.
// The message stays err's, which shows them already.
func withServerErrors(err error) error {
	var sse topology.ServerSelectionError
	if !errors.As(err, &sse) {
		return err
	}
	causes := []error{err}
	for _, s := range sse.Desc.Servers {
		if s.LastError != nil {
			causes = append(causes, s.LastError)
		}
	}
	if len(causes) == 1 { // no server's error is known
		return err
	}
	return withCauses{err, causes}
}

// withCauses is an error whose chain holds other causes beside it.
type withCauses struct {
	error
	causes []error // the error first
}

func (w withCauses) Unwrap() []error { return w.causes }

// isAmbiguous reports whether an acquisition (or a hand-over) that returned
// err may nevertheless have been applied on the server. Only two kinds of
// error prove it was not: a failure before the request was sent (the client
// closed, no server selected, no connection free, too little time left for
// the driver to send it), and a reply that found no document to update or a
// duplicate key. Any other reply may carry a write concern error, or answer
// a retry of a write whose first try was applied.
func isAmbiguous(err error) bool {
	return err != nil && !isNoMatch(err) && !isDuplicateKey(err) &&
		!errors.Is(err, driver.ErrDeadlineWouldBeExceeded) && !isClosed(err) &&
		!errors.As(err, &topology.ServerSelectionError{}) && !errors.As(err, &topology.WaitQueueTimeoutError{})
}

// isUnauthorized reports whether the server refused err's request for want
// of a privilege (Unauthorized).
func isUnauthorized(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(13)
}

// isReply reports whether err is the server's answer to a request, not a
// network failure: the request is over on the server, applied or not.
func isReply(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err)
}

// errUnclaimedRefused is an unclaimedMode attempt's refusal, which claims
// nothing: the lock is held or reserved.
var errUnclaimedRefused = fmt.Errorf("%w (held or reserved)", ErrNotAcquired)

var errNilContext error = invalid("nil context.Context")

var errNilFunction error = invalid("nil function")

// Error is the error type of the library's failed calls and of a lost
// handle's Context cause: it names the call and its lock and wraps the
// cause. Only the two errors listed below are passed on as they are.
//
// errors.As finds it, and so does a type assertion. It names the call (Op)
// and its lock (Name), and wraps the cause (Err), which errors.Is and
// errors.As see through: ErrNotAcquired, ErrLockLost, ErrClosed,
// ErrMismatch, ErrInvalidArgument, ErrNoLock, ErrNoLeader, ErrFenced,
// ErrCollation, ErrStaleTicket, ErrTakenOver, ErrReleased, ctx's error, or
// the server's or the network's.
//
// Two errors are not the library's, and are passed on as they are: the
// error fn returned to Do, when Do has nothing to add to it (with a loss
// or a failed release, Do returns an *Error that wraps both); and
// FencedFindOneAndUpdate's mongo.ErrNoDocuments, which reports no match as
// FindOneAndUpdate does. A released handle's Context cause is
// context.Canceled.
type Error struct {
	// Op names the call.
	//
	// It is one of "new", "new provider", "new composite", "close",
	// "acquire", "try acquire", "do", "release", "upgrade", "downgrade",
	// "inspect", "list", "force release", "force release holder",
	// "campaign", "proclaim", "leader", "run", "fenced update one",
	// "fenced find one and update", "ticket", "take over"; none for a
	// Handle's or a CompositeHandle's Context cause, which no call returns.
	Op string
	// Name is the lock's name, a listing's prefix, or a composite's names;
	// none for "new provider", "new composite" and "close".
	//
	// A composite's Acquire or TryAcquire that a part failed, and the
	// Release of a composite of which one part failed, name that part. A
	// fenced write's is its token source's, if that has one (a Handle, a
	// Leadership).
	Name string
	// Err is the cause, which Unwrap returns.
	Err error
}

// msgPrefix begins each of the package's messages. Error alone writes it:
// causes and sentinels do not carry it.
const msgPrefix = "mongolock: "

// Error returns the message: the package's prefix, the operation, the name
// quoted where the operation has one, and the cause.
//
// The name is quoted as names may be empty or blank.
func (e *Error) Error() string { return msgPrefix + e.unprefixed() }

// unprefixed is e's message without the package's prefix.
func (e *Error) unprefixed() string {
	switch {
	case e.Op == "": // a Handle's Context cause
		return fmt.Sprintf("%q: %v", e.Name, e.Err)
	case e.Op == opNewProvider || e.Op == opNewComposite || e.Op == opClose || e.Name == "" && isFencedOp(e.Op):
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.Op, e.Name, e.Err)
}

// inner joins errs, as errors.Join does, into the cause of an *Error:
// each of them that is an *Error too is said without the package's
// prefix, which the outer one says.
func inner(errs ...error) error {
	if errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil }); len(errs) == 0 {
		return nil
	}
	return innerErrors(errs)
}

// innerErrors are errors within an *Error's cause, one a line.
type innerErrors []error

func (ie innerErrors) Error() string {
	msgs := make([]string, len(ie))
	for i, err := range ie {
		msgs[i] = err.Error()
		if e, ok := err.(*Error); ok {
			msgs[i] = e.unprefixed()
		}
	}
	return strings.Join(msgs, "\n")
}

func (ie innerErrors) Unwrap() []error { return ie }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// The operations whose errors may name no lock: a Provider's as a whole,
// and the fenced writes' (isFencedOp).
const (
	opNewProvider            = "new provider"
	opNewComposite           = "new composite"
	opClose                  = "close"
	opFencedUpdateOne        = "fenced update one"
	opFencedFindOneAndUpdate = "fenced find one and update"
)

// isFencedOp reports whether op is a fenced write's, whose token source
// may have no name.
func isFencedOp(op string) bool { return op == opFencedUpdateOne || op == opFencedFindOneAndUpdate }

// renamed returns err as the error of op, if it is an *Error: a call
// reports itself rather than the call beneath it (an election's, its
// lock's; a Do, its Acquire's or Release's). It copies: the error beneath
// was already told to the Trace hooks.
func renamed(op string, err error) error {
	e, ok := err.(*Error)
	if !ok {
		return err
	}
	r := *e
	r.Op = op
	return &r
}

// shortName shortens name past 64 bytes, without splitting a character:
// names may be megabytes long.
func shortName(name string) string {
	if len(name) > 64 {
		return strings.ToValidUTF8(name[:61], "") + "..."
	}
	return name
}
