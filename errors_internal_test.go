package mongolock

import (
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FerretDB's answers while its PostgreSQL is down, stopping or starting
// (seen in the restart tests' instance, FerretDB
// 2.7), all code 1 InternalError.
var ferretDBOutageMessages = []string{
	"terminating connection due to administrator command",
	"the database system is shutting down",
	"the database system is starting up",
	"failed to deallocate cached statement(s): read tcp 127.0.0.1:44176->127.0.0.1:38835: use of closed network connection",
	"msg_update.go:55 (handler.(*Handler).msgUpdate): pool.go:101 (documentdb.(*Pool).WithConn): pool.go:90 (documentdb.(*Pool).Acquire): " +
		"failed to connect to `user=postgres database=postgres`:\n\t127.0.0.1:38835 (127.0.0.1): dial error: dial tcp 127.0.0.1:38835: connect: connection refused",
}

// Code 1 (InternalError) is transient only as FerretDB's answer while its
// PostgreSQL is unavailable; MongoDB's InternalError is a fault of the
// server, returned rather than retried until ctx ends, and FerretDB's
// duplicate key under code 1 is a duplicate key.
func TestInternalErrorIsTransientOnlyAsFerretDBsPostgreSQLOutage(t *testing.T) {
	commandError := func(msg string) error {
		return mongo.CommandError{Code: 1, Name: "InternalError", Message: msg}
	}
	writeError := func(msg string) error {
		return mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 1, Message: msg}}}
	}
	type row struct {
		label     string
		err       error
		transient bool
	}
	rows := []row{
		{"MongoDB's InternalError", commandError("Invariant failure: an internal error of the server"), false},
		{"MongoDB's InternalError in a write error", writeError("an internal error of the server"), false},
		{"MongoDB's InternalError, wrapped", fmt.Errorf("findAndModify: %w", commandError("unexpected state")), false},
		{"FerretDB's duplicate key", commandError(`duplicate key value violates unique constraint "distributed_locks_pkey"`), false},
		{"FerretDB's duplicate key in a write error", writeError("duplicate key value violates unique constraint"), false},
		{"FerretDB's no match", commandError("(FailedToParse) The $$NOW operator cannot be used within this specific context"), false},
		{"MongoDB's duplicate key", mongo.CommandError{Code: 11000, Name: "DuplicateKey"}, false},
		{"ShutdownInProgress", mongo.CommandError{Code: 91, Name: "ShutdownInProgress"}, true},
		{"WriteConcernFailed", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64}}, true},
		{"another code", mongo.CommandError{Code: 2, Name: "BadValue", Message: "the database system is starting up"}, false},
	}
	for _, msg := range ferretDBOutageMessages {
		rows = append(rows,
			row{"FerretDB: " + msg, commandError(msg), true},
			row{"FerretDB, wrapped: " + msg, fmt.Errorf("update: %w", commandError(msg)), true},
			row{"FerretDB in a write error: " + msg, writeError(msg), true})
	}
	for _, r := range rows {
		if got := isTransient(r.err); got != r.transient {
			t.Errorf("%s: isTransient = %v, want %v", r.label, got, r.transient)
		}
	}
	if isTransient(errors.Join(commandError("an internal error"))) {
		t.Error("a joined MongoDB InternalError: transient")
	}
}
