package mongolock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// UntrackedTicket is h's ticket as another program would present it: a
// take-over in this one does not tell h, which learns of it as a holder
// elsewhere would, at its next extension.
func UntrackedTicket(h *Handle) string { return h.ticketContents().encode() }

// A ticket holds what a taker needs, and nothing that is not a ticket
// passes for one.
func TestParseTicket(t *testing.T) {
	for _, want := range []ticketContents{
		{Kind: KindLock, Database: "db", Collection: "locks", Name: "a", ID: "0123"},
		{Kind: KindElection, Database: "db", Collection: "locks", Name: "", ID: "0123"},
		{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "\x00\xff", ID: "0123", Slots: 3, Units: 2},
		{Kind: KindRWLock, Database: "db", Collection: "c", Name: "rw", ID: "0123", Mode: "u"},
	} {
		got, err := parseTicket(want.encode())
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	good := ticketContents{Kind: KindLock, Database: "db", Collection: "locks", Name: "a", ID: "0123"}.encode()
	for _, bad := range []string{
		"", "mlt1_", "mlt2_" + good[len(ticketPrefix):], good + "=", good[:len(good)-1], good + "A",
		ticketContents{Kind: "mutex", Database: "db", Collection: "locks", Name: "a", ID: "0123"}.encode(),
		ticketContents{Kind: KindLock, Database: "db", Name: "a", ID: "0123"}.encode(),
		ticketContents{Kind: KindLock, Collection: "locks", Name: "a", ID: "0123"}.encode(),
		ticketContents{Kind: KindLock, Database: "db", Collection: "locks", Name: "a"}.encode(),
		ticketContents{Kind: KindRWLock, Database: "db", Collection: "locks", Name: "a", ID: "0123"}.encode(),
		ticketContents{Kind: KindRWLock, Database: "db", Collection: "locks", Name: "a", ID: "0123", Mode: "x"}.encode(),
		ticketContents{Kind: KindLock, Database: "db", Collection: "locks", Name: "a", ID: "0123", Mode: "r"}.encode(),
		// A semaphore's n and units, and only a semaphore's: 1 <= units <= n <= MaxSemaphoreSlots.
		ticketContents{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "s", ID: "0123"}.encode(),
		ticketContents{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "s", ID: "0123", Slots: 2}.encode(),
		ticketContents{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "s", ID: "0123", Slots: 2, Units: 3}.encode(),
		ticketContents{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "s", ID: "0123", Slots: 2, Units: -1}.encode(),
		ticketContents{Kind: KindSemaphore, Database: "db", Collection: "c", Name: "s", ID: "0123", Slots: MaxSemaphoreSlots + 1, Units: 1}.encode(),
		ticketContents{Kind: KindLock, Database: "db", Collection: "locks", Name: "a", ID: "0123", Slots: 1, Units: 1}.encode(),
		ticketContents{Kind: KindRWLock, Database: "db", Collection: "locks", Name: "a", ID: "0123", Mode: "r", Slots: 1}.encode(),
	} {
		_, err := parseTicket(bad)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
	}
}
