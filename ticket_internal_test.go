package mongolock

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// UntrackedTicket is h's ticket as another program would present it: a
// take-over in this one does not tell h, which learns of it as a holder
// elsewhere would, at its next extension.
func UntrackedTicket(h *Handle) string { return h.ticket().encode() }

// The take-overs' statements, as TestGoldenProtocol's: compared with
// testdata/protocol (and so run by TestMemdbMatchesServer on the server
// and on the model). `go test -run Golden -update` rewrites them.
func TestGoldenTakeOverProtocol(t *testing.T) {
	const (
		name    = "reports"
		proc    = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
		lockID  = "0123456789abcdef0123456789abcdef" // the taker's
		holding = "fedcba9876543210fedcba9876543210" // the ticket's
		owner   = "build-7f9c/4242"
	)
	o := defaultConfig()
	value := "http://10.0.0.8:8080"
	lock := func(value *string, turn int) bson.D {
		return bson.D{{Key: "findOneAndUpdate", Value: ownerFilter(name, holding)},
			{Key: "update", Value: takeOverPipeline(proc, owner, o.expiry, lockID, value, turn)},
			{Key: "returnDocument", Value: "after"}}
	}
	for file, stmt := range map[string]bson.D{
		"27-take-over":            lock(nil, turnLength),
		"27-take-over-with-value": lock(&value, electionTurn),
		"28-semaphore-take-over": {{Key: "findOneAndUpdate", Value: semHolderFilter(name, holding)},
			{Key: "update", Value: slotTakeOverPipeline(lockID, holding, owner, o.expiry)},
			{Key: "returnDocument", Value: "after"}, {Key: "fields", Value: takeOverReplyFields(lockID)}},
	} {
		t.Run(file, func(t *testing.T) {
			got, err := bson.MarshalExtJSONIndent(stmt, true, false, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			path := filepath.Join("testdata", "protocol", file+".json")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden file: run go test -run Golden -update")
			require.Equal(t, string(want), string(got), "%s differs from its golden file", file)
		})
	}
}

// A ticket holds what a taker needs, and nothing that is not a ticket
// passes for one.
func TestParseTicket(t *testing.T) {
	for _, want := range []ticket{
		{Kind: KindLock, Collection: "locks", Name: "a", ID: "0123"},
		{Kind: KindElection, Collection: "locks", Name: "", ID: "0123"},
		{Kind: KindSemaphore, Collection: "c", Name: "\x00\xff", ID: "0123"},
		{Kind: KindRWLock, Collection: "c", Name: "rw", ID: "0123", Mode: "u"},
	} {
		got, err := parseTicket(want.encode())
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	good := ticket{Kind: KindLock, Collection: "locks", Name: "a", ID: "0123"}.encode()
	for _, bad := range []string{
		"", "mlt1_", "mlt2_" + good[len(ticketPrefix):], good + "=", good[:len(good)-1], good + "A",
		ticket{Kind: "mutex", Collection: "locks", Name: "a", ID: "0123"}.encode(),
		ticket{Kind: KindLock, Name: "a", ID: "0123"}.encode(),
		ticket{Kind: KindLock, Collection: "locks", Name: "a"}.encode(),
		ticket{Kind: KindRWLock, Collection: "locks", Name: "a", ID: "0123"}.encode(),
		ticket{Kind: KindRWLock, Collection: "locks", Name: "a", ID: "0123", Mode: "x"}.encode(),
		ticket{Kind: KindLock, Collection: "locks", Name: "a", ID: "0123", Mode: "r"}.encode(),
	} {
		_, err := parseTicket(bad)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
	}
}
