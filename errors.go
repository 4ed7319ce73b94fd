package mongolock

import (
	"context"
	"errors"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

var (
	// ErrNotAcquired reports that the lock is held by someone else.
	// TryAcquire returns it when its one attempt finds the lock held; Acquire
	// wraps it, together with ctx.Err(), when ctx ends while the lock was held
	// by someone else the whole time.
	ErrNotAcquired = errors.New("mongolock: not acquired: held by another owner")

	// ErrLockLost reports that a lock was lost while held: its lease expired
	// before an extension succeeded, someone else took it over, or its document
	// was deleted. Handle.Context's cause, Release and Do report it.
	ErrLockLost = errors.New("mongolock: lock lost")
)

// Server error codes that mean "try again" rather than "this request is wrong".
// The list follows the drivers' retryable-writes specification.
var transientCodes = map[int]bool{
	6:     true, // HostUnreachable
	7:     true, // HostNotFound
	89:    true, // NetworkTimeout
	91:    true, // ShutdownInProgress
	134:   true, // ReadConcernMajorityNotAvailableYet
	189:   true, // PrimarySteppedDown
	262:   true, // ExceededTimeLimit
	9001:  true, // SocketException
	10107: true, // NotWritablePrimary
	11600: true, // InterruptedAtShutdown
	11602: true, // InterruptedDueToReplStateChange
	13435: true, // NotPrimaryNoSecondaryOk
	13436: true, // NotPrimaryOrSecondary
	64:    true, // WriteConcernFailed
}

// isTransient reports whether err is worth retrying: the network, server
// selection, a timeout of the round trip, or a server error the drivers'
// specification calls retryable. Context cancellation is not transient: the
// caller asked to stop.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, mongo.ErrClientDisconnected) || errors.Is(err, topology.ErrTopologyClosed) {
		return false
	}
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	if errors.As(err, &topology.ServerSelectionError{}) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		if se.HasErrorLabel("RetryableWriteError") || se.HasErrorLabel("TransientTransactionError") {
			return true
		}
		for _, c := range se.ErrorCodes() {
			if transientCodes[c] {
				return true
			}
		}
	}
	return false
}

// isUpsertRace reports whether err is what a server returns when several
// clients upsert the same brand-new _id at once and this one lost: a
// duplicate key (11000 on MongoDB; code 1 with PostgreSQL's message on
// FerretDB/DocumentDB), or FerretDB's "$$NOW ... cannot be used within this
// specific context". In each case the document now exists and an immediate
// retry decides the acquisition normally.
func isUpsertRace(err error) bool {
	if mongo.IsDuplicateKeyError(err) {
		return true
	}
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "duplicate key value violates unique constraint") ||
		strings.Contains(msg, "$$NOW operator cannot be used")
}

// isAmbiguous reports whether a write that returned err may nevertheless have
// been applied on the server: anything but a reply in which the server said
// no. Such writes are cleaned up (guarantee 6 in PROTOCOL.md).
func isAmbiguous(err error) bool {
	if err == nil {
		return false
	}
	var se mongo.ServerError
	return !errors.As(err, &se) || mongo.IsNetworkError(err)
}
