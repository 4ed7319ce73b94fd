package mongolock

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/testdb"
)

// TestStatementsOfBeforeUnitsAndClaimsDoTheSameOnTheirDocuments: each
// statement that changed when a semaphore's claim came to keep room for
// the units its claimant waits for, and inspection to show the claims,
// does on every document the statements of before could leave (none has
// waitingUnits) what its earlier form (testdata/protocol/
// before-units-and-claims) did: it leaves the same document and gives the
// same reply, but that a claim both write is written with waitingUnits: 1,
// which no earlier statement reads, and that an inspection's reply shows
// the document's claim fields besides. The documents are the differential
// test's states and those where the earlier room for a claimant bites.
// Over the model, and over the test server outside -short.
func TestStatementsOfBeforeUnitsAndClaimsDoTheSameOnTheirDocuments(t *testing.T) {
	claimAndNext := slices.Concat(claimFields[:], nextFields[:])
	adds := map[string][]string{ // by statement, the document's fields its reply shows now
		"10-inspect":               claimAndNext,
		"11-list":                  claimAndNext,
		"16-semaphore-acquire":     nil,
		"16-semaphore-try-acquire": nil,
		"16-semaphore-hand-over":   nil,
		"21-semaphore-inspect":     claimFields[:],
		"22-semaphore-list":        claimFields[:],
	}
	current := map[string]bson.D{}
	for _, g := range goldenStatements(t) {
		current[g.file] = g.cmd
	}
	earlier := statementsIn(t, filepath.Join("testdata", "protocol", "before-units-and-claims"))
	require.Len(t, earlier, len(adds))
	now := bson.DateTime(1_790_000_000_000)
	var thenCases, nowCases []diffCase
	add := func(dc diffCase, before bson.D) {
		for i, d := range dc.docs { // the statements of before never wrote it
			dc.docs[i] = slices.DeleteFunc(slices.Clone(d), func(e bson.E) bool { return e.Key == "waitingUnits" })
		}
		dc.cmd = dc.statement(before)
		thenCases = append(thenCases, dc)
		dc.cmd = dc.statement(current[dc.file])
		nowCases = append(nowCases, dc)
	}
	c := randChooser{rand.New(rand.NewPCG(17, 4))}
	for _, g := range earlier {
		require.Contains(t, adds, g.file)
		for range 48 {
			add(newCase(c, len(nowCases), goldenStatement{g.file, current[g.file]}, now), g.cmd)
		}
		for _, s := range roomStates(now) {
			dc := diffCase{file: g.file, prefix: fmt.Sprintf("c%05d-", len(nowCases)), now: now, params: s.params}
			for _, name := range []string{"reports", "reports/a"} { // inspected and listed
				dc.docs = append(dc.docs, append(bson.D{{Key: "_id", Value: dc.prefix + name}}, s.doc...))
			}
			add(dc, g.cmd)
		}
	}
	t.Run("model", func(t *testing.T) {
		for i, dc := range nowCases {
			then, thenDocs, err := runOnModel(t, thenCases[i], now)
			require.NoError(t, err)
			got, gotDocs, err := runOnModel(t, dc, now)
			require.NoError(t, err)
			checkSameDoing(t, dc, adds[dc.file], then, got, byID(thenDocs), byID(gotDocs))
		}
	})
	t.Run("server", func(t *testing.T) {
		ctx, db := context.Background(), testdb.Database(t)
		then, thenFinal := runOnServer(t, ctx, db.Collection("then"), thenCases)
		got, gotFinal := runOnServer(t, ctx, db.Collection("now"), nowCases)
		byCase := func(final []bson.Raw) map[string][]bson.Raw { // by prefix, in the order of _id
			out := map[string][]bson.Raw{}
			for _, d := range final {
				id := d.Lookup("_id").StringValue()
				prefix := id[:strings.IndexByte(id, '-')+1]
				out[prefix] = append(out[prefix], d)
			}
			return out
		}
		thenDocs, gotDocs := byCase(thenFinal), byCase(gotFinal)
		for i, dc := range nowCases {
			checkSameDoing(t, dc, adds[dc.file], then[i], got[i], thenDocs[dc.prefix], gotDocs[dc.prefix])
		}
	})
}

// checkSameDoing reports where dc's statement of now did not do what
// its earlier form did: then and thenDocs are the earlier's reply and the
// documents it left, got and gotDocs the current one's. The current reply
// may add the document's fields adds; the current document a
// waitingUnits: 1 where the earlier statement wrote a claim, and only
// there.
func checkSameDoing(t *testing.T, dc diffCase, adds []string, then, got outcome, thenDocs, gotDocs []bson.Raw) {
	t.Helper()
	before := map[string]bson.Raw{}
	for _, d := range dc.docs {
		raw, err := bson.Marshal(d)
		require.NoError(t, err)
		before[d[0].Value.(string)] = raw
	}
	shown := got
	shown.docs = nil
	for _, r := range got.docs {
		doc := before[r.Lookup("_id").StringValue()]
		for _, k := range adds {
			if !r.Lookup(k).Equal(doc.Lookup(k)) {
				t.Errorf("%s (case %s): the reply's %s is %v, the document's %v\nreply: %v\ndocument: %v", dc.file, dc.prefix, k, r.Lookup(k), doc.Lookup(k), r, doc)
			}
		}
		shown.docs = append(shown.docs, withoutFields(r, adds...))
	}
	if shown.String() != then.String() {
		t.Errorf("%s (case %s): the reply differs\nstate: %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, dc.docs, then, got)
	}
	require.Equal(t, len(thenDocs), len(gotDocs))
	for i, d := range gotDocs {
		claimed := claimWritten(before[d.Lookup("_id").StringValue()], thenDocs[i], dc.params.proc)
		units, err := d.LookupErr("waitingUnits")
		if (err == nil) != claimed || claimed && units.Int32() != 1 {
			t.Errorf("%s (case %s): waitingUnits %v, where the earlier statement wrote a claim: %v\nstate: %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, units, claimed, dc.docs, thenDocs[i], d)
		}
		if !bytes.Equal(withoutFields(d, "waitingUnits"), thenDocs[i]) {
			t.Errorf("%s (case %s): the document differs\nstate: %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, dc.docs, thenDocs[i], d)
		}
	}
}

// claimWritten reports whether a statement that left after from before
// wrote proc's claim: its last write a claim, the claim proc's, and its
// process or its end new (a claim is written only where one of them
// changes).
func claimWritten(before, after bson.Raw, proc string) bool {
	same := func(k string) bool { return after.Lookup(k).Equal(before.Lookup(k)) }
	lastWrite, _ := after.Lookup("lastWrite").StringValueOK()
	claimant, _ := after.Lookup("waitingProcess").StringValueOK()
	return lastWrite == wroteClaim && claimant == proc && !(same("waitingProcess") && same("waitingUntil"))
}

// withoutFields is doc without its top-level fields keys, the others as
// they were.
func withoutFields(doc bson.Raw, keys ...string) bson.Raw {
	elems, err := doc.Elements()
	if err != nil {
		panic(err)
	}
	out := []byte{0, 0, 0, 0}
	for _, e := range elems {
		if !slices.Contains(keys, e.Key()) {
			out = append(out, e...)
		}
	}
	out = append(out, 0)
	binaryPutLen(out)
	return out
}

// roomState is a document the library's statements could leave, without
// _id, and the parameters of the attempt that meets it.
type roomState struct {
	params caseParams
	doc    bson.D
}

// roomStates are where a claimant's room decides: a semaphore of the
// statements' n (3) or another with none to n live holders (the attempt's
// handle first among them, which a hand-over gives up), a holder that has
// just run out or none, and each claim: none, another process's live
// (younger than the attempt, or older: the attempt takes it over), a
// millisecond from its end, just run out, and the attempt's process's own,
// live, due for renewal and just run out. Besides, a lock held or not,
// with those claims and a next place or none, for inspection.
func roomStates(now bson.DateTime) []roomState {
	since := int64(now-1000) * tokenFloorScale
	older := goldenParams
	older.token = since - 1
	claim := func(proc string, until bson.DateTime) bson.D {
		return bson.D{{Key: "waitingProcess", Value: proc}, {Key: "waitingSince", Value: since}, {Key: "waitingUntil", Value: until}}
	}
	claims := []roomState{
		{goldenParams, nil},
		{goldenParams, claim("p-other", now+391)},
		{older, claim("p-other", now+391)},
		{goldenParams, claim("p-other", now+1)},
		{goldenParams, claim("p-other", now)},
		{goldenParams, claim("p-other", now-1)},
		{goldenParams, claim(goldenProc, now+783)},
		{goldenParams, claim(goldenProc, now+390)},
		{goldenParams, claim(goldenProc, now)},
	}
	lastWrite := func(claim bson.D) bson.E {
		if claim != nil {
			return bson.E{Key: "lastWrite", Value: wroteClaim}
		}
		return bson.E{Key: "lastWrite", Value: wroteAcquire}
	}
	holder := func(id string, k int, until bson.DateTime) bson.D {
		return bson.D{{Key: "id", Value: id}, {Key: "owner", Value: "host/2"}, {Key: "acquiredAt", Value: now - 1000},
			{Key: "expiresAt", Value: until}, {Key: "token", Value: since - int64(k)}}
	}
	var out []roomState
	for _, n := range []int32{3, 2, 4} {
		for live := range min(n, 3) + 1 {
			for _, gone := range []bool{false, true} {
				holders, end := bson.A{}, bson.DateTime(0)
				for k, id := range []string{goldenHolding, "h-1", "h-2"}[:live] {
					holders, end = append(holders, holder(id, k, now+30_000)), now+30_000
				}
				if gone {
					holders, end = append(holders, holder("h-gone", 3, now)), max(end, now)
				}
				for _, c := range claims {
					doc := bson.D{{Key: "kind", Value: "semaphore"}, {Key: "n", Value: n}, {Key: "holders", Value: holders},
						{Key: "expiresAt", Value: end}, {Key: "fencingToken", Value: since}}
					out = append(out, roomState{c.params, append(append(doc, c.doc...), lastWrite(c.doc))})
				}
			}
		}
	}
	place := bson.D{{Key: "nextProcess", Value: "p-third"}, {Key: "nextSince", Value: since + 1}, {Key: "nextUntil", Value: now + 600_000}}
	for _, end := range []bson.DateTime{now + 30_000, now} {
		for _, c := range claims {
			for _, next := range []bson.D{nil, place} {
				doc := bson.D{{Key: "lockId", Value: goldenHolding}, {Key: "acquiredAt", Value: now - 1000}, {Key: "expiresAt", Value: end},
					{Key: "fencingToken", Value: since}, {Key: "owner", Value: "host/1"}, {Key: "lastProcess", Value: "p-other"},
					{Key: "lastLockId", Value: goldenHolding}, {Key: "processStreak", Value: int32(1)}}
				out = append(out, roomState{c.params, append(slices.Concat(doc, c.doc, next), lastWrite(c.doc))})
			}
		}
	}
	return out
}
