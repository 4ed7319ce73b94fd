// Package backend holds the hooks by which package mongolocktest and the
// mongolock command reach what the root package keeps unexported: a
// Provider over a database in process memory, and a Handle's loss and
// release of their own. It exists so that the root package exports
// nothing for them.
package backend

import (
	"context"

	"github.com/mongolock/mongolock/internal/memdb"
)

// Hooks the root package sets in its init.
var (
	// NewProvider validates opts (a []mongolock.Option) as
	// mongolock.NewProvider does, and returns a *mongolock.Provider whose
	// engine is the one that runs over MongoDB, its statements applied to
	// s, a database named db in process memory (a memdb.Store, or a
	// replica set's client); on an error, a nil *mongolock.Provider.
	NewProvider func(s memdb.Conn, db string, opts any) (any, error)
	// Lose ends h's acquisition, h a *mongolock.Handle of such a provider,
	// as a force release of its holder does through the store, and
	// signals the loss at once, as the extension that finds it ended
	// would. A handle released or lost already is left as it is. In a
	// partition the store keeps the holder until its lease ends. It returns
	// false if h is not a handle of such a provider.
	Lose func(h any) bool
	// ReleaseUnused releases h, a *mongolock.Handle whose job never ran
	// (the mongolock command's could not start), freeing its lock at once
	// whatever WithHoldAtLeast says; it returns Release's error.
	ReleaseUnused func(ctx context.Context, h any) error
	// LossOf returns why h, a *mongolock.Handle, was lost, or nil, without
	// releasing it: the mongolock command says why at once, and releases
	// only once its command has stopped.
	LossOf func(h any) error
	// TicketHolder returns the name and the holder's id (as
	// mongolock.HolderInfo's ID) of the acquisition that ticket was made
	// of, or ok false for a string that is not a ticket: the mongolock
	// command's extend keeps that holder's owner.
	TicketHolder func(ticket string) (name, id string, ok bool)
)
