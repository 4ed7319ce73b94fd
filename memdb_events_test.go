package mongolock

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/memdb"
)

// goldenAt is the statement of testdata/protocol/<file>.json with its
// $$NOW set to now, as the model's clock.
func goldenAt(t *testing.T, file string, now bson.DateTime) bson.D {
	t.Helper()
	for _, g := range goldenStatements(t) {
		if g.file == file {
			return substitute(g.cmd, func(v any) any {
				if v == "$$NOW" {
					return bson.D{{Key: "$literal", Value: now}}
				}
				return v
			}).(bson.D)
		}
	}
	t.Fatalf("no golden statement %s", file)
	return nil
}

func drain(t *testing.T, s *memdb.Stream) []bson.Raw {
	t.Helper()
	var out []bson.Raw
	for {
		ev, err := s.Next()
		require.NoError(t, err)
		if ev == nil {
			return out
		}
		out = append(out, ev)
	}
}

func types(evs []bson.Raw) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Lookup("operationType").StringValue())
	}
	return out
}

// eventForms are the forms of the model's change events, by the MongoDB
// versions that report them so.
var eventForms = []memdb.Events{memdb.Events8, memdb.Events44}

// forEachEventForm runs test once per form of the model's change events.
func forEachEventForm(t *testing.T, test func(t *testing.T, form memdb.Events)) {
	for _, form := range eventForms {
		t.Run("MongoDB "+form.String(), func(t *testing.T) { test(t, form) })
	}
}

// TestMemdbEventsAreMongoDBsAndReleaseEventsPassExactlyTheReleases: the
// library's statements, run on the model, produce the change events
// MongoDB does (an update document's as an update with its description;
// a pipeline's as 4.4's replace, or as 8.0's update with the diff, or its
// replace where the diff would be as large as the document; none for a
// write that changed nothing), and the watch statement's $match passes
// the releases and nothing else.
func TestMemdbEventsAreMongoDBsAndReleaseEventsPassExactlyTheReleases(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		now := bson.DateTime(1_790_000_000_000)
		c := &memdb.Table{DB: "db", Name: "locks", Events: form}
		all, err := c.Watch(nil)
		require.NoError(t, err)
		releases, err := c.Watch(releaseEvents)
		require.NoError(t, err)
		run := func(file string) outcome {
			o, err := onModel(c, now, goldenAt(t, file, now))
			require.NoError(t, err)
			require.Empty(t, o.err, file)
			return o
		}
		held := bson.D{{Key: "_id", Value: "reports"}, {Key: "lockId", Value: goldenHolding},
			{Key: "expiresAt", Value: now + 30_000}, {Key: "fencingToken", Value: int64(7)}}
		require.NoError(t, c.InsertOne(now.Time(), held))
		require.Equal(t, 1, run("5-extend").modified)  // pipeline: lastWrite extend
		require.Equal(t, 1, run("4-release").modified) // classic: update, lockId removed
		require.Equal(t, 0, run("4-release").matched)  // nothing matched: no event
		matched, modified, err := c.UpdateOne(now.Time(), bson.D{{Key: "_id", Value: "reports"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "lockId", Value: ""}}}})
		require.NoError(t, err)
		require.Equal(t, [2]int{1, 0}, [2]int{matched, modified}) // changed nothing: no event
		require.Len(t, run("2-acquire").docs, 1)                  // pipeline: lastWrite acquire
		require.Equal(t, 1, run("12-force-release").modified)     // pipeline: lastWrite release
		deleted, err := c.DeleteOne(now.Time(), bson.D{{Key: "_id", Value: "reports"}})
		require.NoError(t, err)
		require.True(t, deleted)

		evs := drain(t, all)
		// On 8.0 the extension and the force release are diffs smaller
		// than the document, the acquisition, which writes most of its
		// fields anew, is not.
		wantTypes := map[memdb.Events][]string{
			memdb.Events44: {"insert", "replace", "update", "replace", "replace", "delete"},
			memdb.Events8:  {"insert", "update", "update", "replace", "update", "delete"},
		}[form]
		require.Equal(t, wantTypes, types(evs))
		for _, ev := range evs {
			keys, err := ev.Elements()
			require.NoError(t, err)
			var names []string
			for _, k := range keys {
				names = append(names, k.Key())
			}
			want := []string{"_id", "operationType", "clusterTime", "wallTime", "fullDocument", "ns", "documentKey"}
			switch types([]bson.Raw{ev})[0] {
			case "update":
				want = slices.Concat(slices.Delete(want, 4, 5), []string{"updateDescription"})
			case "delete":
				want = slices.Delete(want, 4, 5)
			}
			require.Equal(t, want, names, ev.String())
			require.Equal(t, "reports", ev.Lookup("documentKey", "_id").StringValue())
			require.Equal(t, int64(now), ev.Lookup("wallTime").DateTime())
		}
		require.Equal(t, held, func() (d bson.D) {
			require.NoError(t, bson.Unmarshal(evs[0].Lookup("fullDocument").Document(), &d))
			return d
		}())
		description := func(ev bson.Raw) string { return ev.Lookup("updateDescription").Document().String() }
		release := `{"updatedFields": {"expiresAt": {"$date":{"$numberLong":"1790000000000"}}},"removedFields": ["lockId"]}`
		if form == memdb.Events44 {
			require.Equal(t, "extend", evs[1].Lookup("fullDocument", "lastWrite").StringValue())
			require.Equal(t, now+30_000, bson.DateTime(evs[1].Lookup("fullDocument", "expiresAt").Time().UnixMilli()))
			require.Equal(t, "release", evs[4].Lookup("fullDocument", "lastWrite").StringValue())
			_, hasLockID := evs[4].Lookup("fullDocument").Document().Lookup("lockId").StringValueOK()
			require.False(t, hasLockID)
		} else {
			// The extension's expiresAt is the one it had: only lastWrite changed.
			require.Equal(t, `{"updatedFields": {"lastWrite": "extend"},"removedFields": [],"truncatedArrays": []}`, description(evs[1]))
			require.Equal(t, `{"updatedFields": {"expiresAt": {"$date":{"$numberLong":"1790000000000"}},"lastWrite": "release"},"removedFields": ["lockId"],"truncatedArrays": []}`, description(evs[4]))
			release = strings.TrimSuffix(release, "}") + `,"truncatedArrays": []}`
		}
		require.Equal(t, release, description(evs[2]))
		require.Equal(t, "acquire", evs[3].Lookup("fullDocument", "lastWrite").StringValue())

		got := drain(t, releases)
		require.Equal(t, []bson.Raw{evs[2], evs[4], evs[5]}, got)
	})
}

// TestMemdbSemaphoreReleaseEventPassesReleaseEvents: a slot's release, an
// update document ($pull, $currentDate), is an update event with the
// whole holders array and releasedAt, which the watch statement passes.
func TestMemdbSemaphoreReleaseEventPassesReleaseEvents(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		now := bson.DateTime(1_790_000_000_000)
		c := &memdb.Table{Events: form}
		holders := bson.A{bson.D{{Key: "id", Value: goldenHolding}}, bson.D{{Key: "id", Value: "other"}}}
		require.NoError(t, c.InsertOne(now.Time(), bson.D{{Key: "_id", Value: "reports"}, {Key: "kind", Value: "semaphore"}, {Key: "holders", Value: holders}}))
		releases, err := c.Watch(releaseEvents)
		require.NoError(t, err)
		o, err := onModel(c, now, goldenAt(t, "17-semaphore-release", now))
		require.NoError(t, err)
		require.Equal(t, 1, o.modified)
		got := drain(t, releases)
		require.Len(t, got, 1)
		require.Equal(t, `{"holders": [{"id": "other"}],"releasedAt": {"$date":{"$numberLong":"1790000000000"}}}`,
			got[0].Lookup("updateDescription", "updatedFields").Document().String())
	})
}

// releaseStatement says whether statement file's write of a document,
// which left it as after, released a holder: what release events are
// for. A release, a force release, a slot's release, an undone upgrade
// and a downgrade always do; a hand-over that was refused (its last write
// a release); a release holding the lock only once its hold is over.
// Nothing else does: acquisitions, extensions, claims, withdrawals,
// proclaims, upgrades' polls.
func releaseStatement(file string, after bson.D) bool {
	switch file {
	case "4-release", "12-force-release", "12-force-release-holder", "17-semaphore-release",
		"23-semaphore-force-release", "23-semaphore-force-release-holder", "25-rwlock-undo-upgrade", "26-rwlock-downgrade":
		return true
	case "4a-release-holding":
		_, held := field(after, "lockId")
		return !held
	}
	if strings.HasSuffix(file, "hand-over") || strings.HasSuffix(file, "hand-over-with-value") {
		lastWrite, _ := field(after, "lastWrite")
		return lastWrite == wroteRelease
	}
	return false
}

// TestReleaseEventsPassEveryReleaseOfTheModelAndNothingElse: every
// statement the library sends, over the differential test's states, run
// on the model in each form of its change events: each event of a release
// passes the watch's $match (releaseEvents), and no other. Each state is
// met twice: as drawn, and as a release in the same millisecond leaves
// it (releasedAt stamped with this $$NOW, the last write a release), where
// a pipeline's diff does not list a stamp it writes again. Among the
// releases are slots' that leave other holders.
func TestReleaseEventsPassEveryReleaseOfTheModelAndNothingElse(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		c := randChooser{rand.New(rand.NewPCG(33, 8))}
		now := bson.DateTime(1_790_000_000_000)
		var releases, updates, leaving int // release events, updates among them, slots' that leave holders
		for _, g := range goldenStatements(t) {
			for i := range 24 {
				dc := newCase(c, i, g, now)
				for _, again := range []bool{false, true} {
					table := &memdb.Table{DB: "db", Name: "locks", Events: form}
					before := map[string]bson.D{}
					for _, d := range dc.docs {
						if again {
							d = slices.Clone(d)
							for _, e := range []bson.E{{Key: "releasedAt", Value: now}, {Key: "lastWrite", Value: wroteRelease}} {
								if i := slices.IndexFunc(d, func(f bson.E) bool { return f.Key == e.Key }); i >= 0 {
									d[i] = e
								} else {
									d = append(d, e)
								}
							}
						}
						before[d[0].Value.(string)] = d
						require.NoError(t, table.InsertOne(now.Time(), d))
					}
					all, err := table.Watch(nil)
					require.NoError(t, err)
					passed, err := table.Watch(releaseEvents)
					require.NoError(t, err)
					o, err := onModel(table, now, dc.cmd)
					require.NoError(t, err, dc.file)
					after := map[string]bson.D{}
					for _, raw := range table.Docs() {
						var d bson.D
						require.NoError(t, bson.Unmarshal(raw, &d))
						after[d[0].Value.(string)] = d
					}
					passing := drain(t, passed)
					for _, ev := range drain(t, all) {
						id := ev.Lookup("documentKey", "_id").StringValue()
						want := releaseStatement(dc.file, after[id])
						if got := slices.ContainsFunc(passing, func(r bson.Raw) bool { return bytes.Equal(r, ev) }); got != want {
							t.Errorf("%s (again: %v): passed %v, want %v\nstate: %v\nafter: %v\nevent: %v\nreply: %v", dc.file, again, got, want, before[id], after[id], ev, o)
						} else if want {
							releases++
							if ev.Lookup("operationType").StringValue() == "update" {
								updates++
							}
							if holders, ok := field(after[id], "holders"); ok && len(holders.(bson.A)) > 0 {
								leaving++
							}
						}
					}
				}
			}
		}
		t.Logf("%d release events, %d of them updates, %d of slots that leave holders", releases, updates, leaving)
		require.Positive(t, leaving, "no release of a slot that leaves other holders was met")
		if form == memdb.Events8 {
			require.Positive(t, updates, "no release was an update event")
		}
	})
}

// TestReleasesOfSlotsWithinOneMillisecondEachPassReleaseEvents: a slot's
// release by an update document, then two by a pipeline (force releases
// of one holder), all at one $$NOW, of a semaphore whose other holder
// stays: each is an event the watch's $match passes, in both forms.
func TestReleasesOfSlotsWithinOneMillisecondEachPassReleaseEvents(t *testing.T) {
	forEachEventForm(t, func(t *testing.T, form memdb.Events) {
		now := bson.DateTime(1_790_000_000_000)
		c := &memdb.Table{DB: "db", Name: "locks_semaphores", Events: form}
		holders := bson.A{}
		for _, id := range []string{"h1", "h2", "h3", "h4"} {
			holders = append(holders, bson.D{{Key: "id", Value: id}, {Key: "owner", Value: "host/1"},
				{Key: "acquiredAt", Value: now - 1000}, {Key: "expiresAt", Value: now + 30_000}, {Key: "token", Value: int64(7)}})
		}
		require.NoError(t, c.InsertOne(now.Time(), bson.D{{Key: "_id", Value: "reports"}, {Key: "kind", Value: "semaphore"}, {Key: "n", Value: int32(4)},
			{Key: "holders", Value: holders}, {Key: "fencingToken", Value: int64(7)}, {Key: "expiresAt", Value: now + 30_000}, {Key: "lastWrite", Value: wroteAcquire}}))
		releases, err := c.Watch(releaseEvents)
		require.NoError(t, err)
		for _, r := range []struct{ file, id string }{
			{"17-semaphore-release", "h1"}, {"23-semaphore-force-release-holder", "h2"}, {"23-semaphore-force-release-holder", "h3"},
		} {
			cmd := substitute(goldenAt(t, r.file, now), func(v any) any {
				if v == goldenHolding {
					return r.id
				}
				return v
			}).(bson.D)
			o, err := onModel(c, now, cmd)
			require.NoError(t, err)
			require.Equal(t, 1, o.modified, "%s of %s", r.file, r.id)
			require.Len(t, drain(t, releases), 1, "%s of %s within the millisecond of the release before", r.file, r.id)
		}
		var d bson.D
		require.NoError(t, bson.Unmarshal(c.Docs()[0], &d))
		left, _ := field(d, "holders")
		require.Len(t, left, 1, "h4 holds")
	})
}
