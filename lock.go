package mongolock

import (
	"time"
	"unicode/utf8"
)

// A Lock is a named distributed lock. It is safe for concurrent use.
//
// It holds no state of its own: every Acquire or TryAcquire that succeeds
// returns a new Handle, and the lock is held until that Handle is released
// or lost. Two Acquire calls on the same Lock compete like any two holders.
type Lock struct {
	p    *Provider
	name string
	kind kindDriver // what it is: a lock, an election's, a semaphore's slot, a reader-writer lock's mode
}

// Name returns the lock's name, exactly as given.
func (l *Lock) Name() string { return l.name }

// checkName refuses a name that is not valid UTF-8: BSON's strings are
// UTF-8, and a server may refuse or alter such a string. Every other Go
// string is a name.
func checkName(name string) error {
	if !utf8.ValidString(name) {
		return errNameNotUTF8
	}
	return nil
}

var errNameNotUTF8 error = invalid("the name is not valid UTF-8, as BSON's strings must be")

// collection is where l's document is.
func (l *Lock) collection() *lockCollection { return l.kind.collection(l.p) }

const (
	// maxCreateTries bounds how often one attempt creates the lock document
	// and tries again (attempt).
	maxCreateTries = 5
	// cleanupTimeout bounds a background release of an acquisition nobody
	// will get a handle for, or of a failed Release.
	cleanupTimeout = 5 * time.Second
)

// info says which lock l is.
func (l *Lock) info() TraceLock {
	sp, d := l.collection(), l.kind.describe()
	return TraceLock{Name: shortName(l.name), Kind: d.kind, Mode: d.modeName, Slots: d.slots, Units: d.units, Database: sp.db, Collection: sp.name}
}

// errorf wraps err with the operation and the lock's name, shortened
// without splitting a character: names may be megabytes long.
func (l *Lock) errorf(op string, err error) error {
	return &Error{Op: op, Name: shortName(l.name), Err: err}
}
