package mongolock

import (
	"bytes"
	"context"
	"fmt"
	"maps"
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
	before := docsByID(t, dc)
	for _, r := range got.docs {
		doc := before[r.Lookup("_id").StringValue()]
		for _, k := range adds {
			if !r.Lookup(k).Equal(doc.Lookup(k)) {
				t.Errorf("%s (case %s): the reply's %s is %v, the document's %v\nreply: %v\ndocument: %v", dc.file, dc.prefix, k, r.Lookup(k), doc.Lookup(k), r, doc)
			}
		}
	}
	if withoutFieldsOf(got, adds...).String() != then.String() {
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

// TestStatementsOfBeforeTakeOverRecordsDoTheSameOnTheirDocuments: the five
// statements that changed when a take-over came to record what it took
// (takenOverLockId, takenOverIds) and the holders statements to read it,
// each beside its earlier form (testdata/protocol/before-take-over-records)
// on every document the statements of before could leave (none has a
// record): the same reply and the same document, but for the record a
// take-over that took writes, and the reply of a lock's take-over, which
// shows it. And an older process beside a newer one: each statement an
// older process sends (the earlier forms of those five, and every other
// as it is) does on a document with records what it does on the same
// document without, and leaves the records as they were. The documents
// are the differential test's states and the claimant's-room ones, which
// hold the ticket's acquisition live. Over the model, and over the test
// server outside -short, where the model and the server also agree on
// every current statement over documents with records; a slot's take-over
// on a full record drops its first.
func TestStatementsOfBeforeTakeOverRecordsDoTheSameOnTheirDocuments(t *testing.T) {
	current := map[string]bson.D{}
	for _, g := range goldenStatements(t) {
		current[g.file] = g.cmd
	}
	earlier := statementsIn(t, filepath.Join("testdata", "protocol", "before-take-over-records"))
	require.Len(t, earlier, 5)
	now := bson.DateTime(1_790_000_000_000)
	c := randChooser{rand.New(rand.NewPCG(27, 28))}

	// The current forms beside the earlier ones, on documents without records.
	var thenCases, nowCases []diffCase
	add := func(dc diffCase, before bson.D) {
		dc.cmd = dc.statement(before)
		thenCases = append(thenCases, dc)
		dc.cmd = dc.statement(current[dc.file])
		nowCases = append(nowCases, dc)
	}
	older := map[string]goldenStatement{} // what an older process sends, by file
	for _, g := range goldenStatements(t) {
		older[g.file] = g
	}
	for _, g := range earlier {
		require.Contains(t, current, g.file)
		older[g.file] = g
		for range 96 {
			add(newCase(c, len(nowCases), goldenStatement{g.file, current[g.file]}, now), g.cmd)
		}
		for _, s := range roomStates(now) {
			dc := diffCase{file: g.file, prefix: fmt.Sprintf("c%05d-", len(nowCases)), now: now, params: s.params}
			dc.docs = append(dc.docs, append(bson.D{{Key: "_id", Value: dc.prefix + "reports"}}, s.doc...))
			add(dc, g.cmd)
		}
	}
	// An older process's statements on documents without records (bare)
	// and the same with them (recorded); every current statement on
	// documents with records (recordedNow).
	var bare, recorded, recordedNow []diffCase
	for _, file := range slices.Sorted(maps.Keys(older)) {
		for range 24 {
			dc := newCase(c, len(bare), older[file], now)
			bare = append(bare, dc)
			dc.docs = withRecords(c, dc.docs)
			recorded = append(recorded, dc)
			dc.cmd = dc.statement(current[file])
			recordedNow = append(recordedNow, dc)
		}
	}
	// A slot's take-over where the record is full: it drops the first.
	full := bson.A{}
	for k := range takenOverKept {
		full = append(full, fmt.Sprintf("id-%d", k))
	}
	fullCase := diffCase{file: "28-semaphore-take-over", prefix: fmt.Sprintf("c%05d-", len(recordedNow)), now: now, params: goldenParams}
	fullCase.cmd = fullCase.statement(current[fullCase.file])
	fullCase.docs = []bson.D{{{Key: "_id", Value: fullCase.prefix + "reports"}, {Key: "kind", Value: "semaphore"}, {Key: "n", Value: int32(2)},
		{Key: "holders", Value: bson.A{bson.D{{Key: "id", Value: goldenHolding}, {Key: "owner", Value: "host/2"},
			{Key: "acquiredAt", Value: now - 1000}, {Key: "expiresAt", Value: now + 30_000}, {Key: "token", Value: int64(now) * tokenFloorScale}}}},
		{Key: "expiresAt", Value: now + 30_000}, {Key: "fencingToken", Value: int64(now) * tokenFloorScale}, {Key: "takenOverIds", Value: full}}}
	recordedNow = append(recordedNow, fullCase)

	check := func(t *testing.T, then, got, bareOut, recordedOut []outcome, thenDocs, gotDocs, bareDocs, recordedDocs map[string][]bson.Raw) {
		took := map[string]int{} // by file, the cases whose take-over took
		for i, dc := range nowCases {
			if checkRecordedOnly(t, dc, then[i], got[i], thenDocs[dc.prefix], gotDocs[dc.prefix]) {
				took[dc.file]++
			}
		}
		for _, g := range earlier {
			if strings.Contains(g.file, "take-over") && took[g.file] == 0 {
				t.Errorf("%s: no case took the ticket's acquisition over", g.file)
			}
		}
		for i, dc := range recorded {
			checkRecordsCarried(t, dc, bareOut[i], recordedOut[i], bareDocs[dc.prefix], recordedDocs[dc.prefix])
		}
	}
	t.Run("model", func(t *testing.T) {
		run := func(cases []diffCase) ([]outcome, map[string][]bson.Raw) {
			outs, docs := make([]outcome, len(cases)), map[string][]bson.Raw{}
			for i, dc := range cases {
				o, d, err := runOnModel(t, dc, now)
				require.NoError(t, err, "%s (case %s)", dc.file, dc.prefix)
				outs[i], docs[dc.prefix] = o, byID(d)
			}
			return outs, docs
		}
		then, thenDocs := run(thenCases)
		got, gotDocs := run(nowCases)
		bareOut, bareDocs := run(bare)
		recordedOut, recordedDocs := run(recorded)
		check(t, then, got, bareOut, recordedOut, thenDocs, gotDocs, bareDocs, recordedDocs)
		_, docs, err := runOnModel(t, fullCase, now)
		require.NoError(t, err)
		ids, err := docs[0].Lookup("takenOverIds").Array().Values()
		require.NoError(t, err)
		require.Len(t, ids, takenOverKept)
		require.Equal(t, "id-1", ids[0].StringValue())
		require.Equal(t, goldenHolding, ids[takenOverKept-1].StringValue())
	})
	t.Run("server", func(t *testing.T) {
		ctx, db := context.Background(), testdb.Database(t)
		run := func(coll string, cases []diffCase) ([]outcome, map[string][]bson.Raw) {
			outs, final := runOnServer(t, ctx, db.Collection(coll), cases)
			return outs, byPrefix(final)
		}
		then, thenDocs := run("then", thenCases)
		got, gotDocs := run("now", nowCases)
		bareOut, bareDocs := run("bare", bare)
		recordedOut, recordedDocs := run("recorded", recorded)
		check(t, then, got, bareOut, recordedOut, thenDocs, gotDocs, bareDocs, recordedDocs)
		compareCases(t, ctx, db.Collection("memdb"), recordedNow)
	})
}

// byPrefix is docs by the prefix of their _id, its case's, in the order
// of _id.
func byPrefix(docs []bson.Raw) map[string][]bson.Raw {
	out := map[string][]bson.Raw{}
	for _, d := range docs {
		id := d.Lookup("_id").StringValue()
		prefix := id[:strings.IndexByte(id, '-')+1]
		out[prefix] = append(out[prefix], d)
	}
	return out
}

// takeOverRecords are the fields in which a take-over records what it took.
var takeOverRecords = []string{"takenOverLockId", "takenOverIds"}

// withRecords is docs, most of them with records of earlier take-overs: a
// lock's takenOverLockId, a slot document's takenOverIds.
func withRecords(c chooser, docs []bson.D) []bson.D {
	out := make([]bson.D, len(docs))
	for i, d := range docs {
		out[i] = slices.Clone(d)
		switch {
		case c.intn(4) == 0:
		case slices.ContainsFunc(d, func(e bson.E) bool { return e.Key == "kind" }):
			ids := bson.A{}
			for range pick(c, 1, 2, 3, takenOverKept) { // full: a take-over drops the first
				ids = append(ids, pick(c, idPool...))
			}
			out[i] = append(out[i], bson.E{Key: "takenOverIds", Value: ids})
		default:
			out[i] = append(out[i], bson.E{Key: "takenOverLockId", Value: pick(c, idPool...)})
		}
	}
	return out
}

// checkRecordedOnly reports where dc's statement of now did not do what its
// earlier form did, on documents without records: then and thenDocs are
// the earlier's reply and the documents it left, got and gotDocs the
// current one's. Where the earlier took the ticket's acquisition over
// (changed the document), the current one records it, and only there. It
// returns whether it took.
func checkRecordedOnly(t *testing.T, dc diffCase, then, got outcome, thenDocs, gotDocs []bson.Raw) (tookAny bool) {
	t.Helper()
	before := docsByID(t, dc)
	if withoutFieldsOf(got, takeOverRecords...).String() != then.String() {
		t.Errorf("%s (case %s): the reply differs\nstate: %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, dc.docs, then, got)
	}
	require.Equal(t, len(thenDocs), len(gotDocs))
	for i, d := range gotDocs {
		took := !bytes.Equal(thenDocs[i], before[d.Lookup("_id").StringValue()])
		lockID, lockRecord := d.Lookup("takenOverLockId").StringValueOK()
		ids, slotRecord := d.Lookup("takenOverIds").ArrayOK()
		has, other := lockRecord || slotRecord, false // a record, and one of the other kind's
		switch {
		case strings.HasPrefix(dc.file, "27-"):
			has, other = lockRecord, slotRecord
			if lockRecord && lockID != dc.params.holding {
				t.Errorf("%s (case %s): takenOverLockId %q, not the ticket's %q", dc.file, dc.prefix, lockID, dc.params.holding)
			}
		case strings.HasPrefix(dc.file, "28-"):
			has, other = slotRecord, lockRecord
			if vals, _ := ids.Values(); slotRecord && (len(vals) != 1 || vals[0].StringValue() != dc.params.holding) {
				t.Errorf("%s (case %s): takenOverIds %v, not the ticket's [%q]", dc.file, dc.prefix, ids, dc.params.holding)
			}
		default:
			took = false // the holders statements write nothing
		}
		tookAny = tookAny || took
		if has != took || other {
			t.Errorf("%s (case %s): recorded %v, where the earlier statement took %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, has || other, took, thenDocs[i], d)
		}
		if !bytes.Equal(withoutFields(d, takeOverRecords...), thenDocs[i]) {
			t.Errorf("%s (case %s): the document differs\nstate: %v\nbefore: %v\nnow:    %v", dc.file, dc.prefix, dc.docs, thenDocs[i], d)
		}
	}
	return tookAny
}

// checkRecordsCarried reports where an older process's statement did on a
// document with records (recorded, recordedDocs) other than on the same
// document without (bare, bareDocs), or changed a record.
func checkRecordsCarried(t *testing.T, dc diffCase, bare, recorded outcome, bareDocs, recordedDocs []bson.Raw) {
	t.Helper()
	records := docsByID(t, dc)
	if withoutFieldsOf(recorded, takeOverRecords...).String() != bare.String() {
		t.Errorf("%s (case %s): the reply differs with records\nstate: %v\nwithout: %v\nwith:    %v", dc.file, dc.prefix, dc.docs, bare, recorded)
	}
	require.Equal(t, len(bareDocs), len(recordedDocs), "%s (case %s)", dc.file, dc.prefix)
	for i, d := range recordedDocs {
		added := records[d.Lookup("_id").StringValue()]
		for _, k := range takeOverRecords {
			if v, err := d.LookupErr(k); err == nil && !v.Equal(added.Lookup(k)) {
				t.Errorf("%s (case %s): the record %s is %v, was %v", dc.file, dc.prefix, k, v, added.Lookup(k))
			}
		}
		// $currentDate writes the server's time of each run: present in both, or neither.
		stamped := currentDateFields(dc.cmd)
		for _, k := range stamped {
			_, errWith := d.LookupErr(k)
			_, errWithout := bareDocs[i].LookupErr(k)
			if (errWith == nil) != (errWithout == nil) {
				t.Errorf("%s (case %s): %s written with records %v, without %v", dc.file, dc.prefix, k, errWith == nil, errWithout == nil)
			}
		}
		if !bytes.Equal(withoutFields(d, append(stamped, takeOverRecords...)...), withoutFields(bareDocs[i], stamped...)) {
			t.Errorf("%s (case %s): the document differs with records\nstate: %v\nwithout: %v\nwith:    %v", dc.file, dc.prefix, dc.docs, bareDocs[i], d)
		}
	}
}

// docsByID returns dc's documents, marshalled, by their _id.
func docsByID(t *testing.T, dc diffCase) map[string]bson.Raw {
	t.Helper()
	byID := map[string]bson.Raw{}
	for _, d := range dc.docs {
		raw, err := bson.Marshal(d)
		require.NoError(t, err)
		byID[d[0].Value.(string)] = raw
	}
	return byID
}

// withoutFieldsOf returns o with fields left out of its documents.
func withoutFieldsOf(o outcome, fields ...string) outcome {
	shown := o
	shown.docs = nil
	for _, r := range o.docs {
		shown.docs = append(shown.docs, withoutFields(r, fields...))
	}
	return shown
}
