package mongolock

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGoldenProtocol")

// Every statement the library sends, rendered as canonical Extended JSON
// and compared with testdata/protocol/*.json: any change to what goes over
// the wire shows in review. `go test -run Golden -update` rewrites them.
func TestGoldenProtocol(t *testing.T) {
	const (
		name    = "reports"
		proc    = "0f1e2d3c4b5a69788796a5b4c3d2e1f0" // this process
		lockID  = "0123456789abcdef0123456789abcdef" // the attempt's
		holding = "fedcba9876543210fedcba9876543210" // a held handle's
		owner   = "build-7f9c/4242"                  // WithOwner's default: host/pid
	)
	o := defaultConfig() // expiry 30 s, claims of 783 ms
	acquireWith := func(filter bson.D, mode attemptMode, value *string) bson.D {
		turn := turnLength
		if value != nil { // a campaign's
			turn = electionTurn
		}
		return bson.D{
			{Key: "findOneAndUpdate", Value: filter},
			{Key: "update", Value: acquirePipeline(lockID, 1795000000000000000, value, newAcquireParts(acquirer{proc, owner, mode, o.expiry, o.claimLifetime(), o.nextLifetime(), turn}))},
			{Key: "returnDocument", Value: "after"},
		}
	}
	acquire := func(filter bson.D, mode attemptMode) bson.D { return acquireWith(filter, mode, nil) }
	unitsAcquire := func(n, units int, rw rwMode, mode attemptMode) bson.D {
		filter, releasing := acquireFilter(name), ""
		if mode == handOverMode {
			filter, releasing = semHolderFilter(name, holding), holding
		}
		a := slotAttempt{id: lockID, releasing: releasing, waitToken: 1795000000000000000, proc: proc, owner: owner, n: n, units: units, rw: rw, mode: mode, expiry: o.expiry, claim: o.claimLifetime()}
		return bson.D{{Key: "findOneAndUpdate", Value: filter}, {Key: "update", Value: slotPipeline(a)}, {Key: "returnDocument", Value: "after"}, {Key: "fields", Value: slotReplyFields}}
	}
	slotAcquire := func(n int, rw rwMode, mode attemptMode) bson.D { return unitsAcquire(n, 0, rw, mode) }
	leaderValue := "http://10.0.0.7:8080"
	holders, projection := holdersQuery(bson.A{name, "invoices"})
	semHolders, semProjection := semHoldersQuery(bson.A{name, "invoices"})
	var index options.IndexOptions
	for _, set := range ttlIndex().Options.List() {
		require.NoError(t, set(&index))
	}
	statements := map[string]bson.D{
		"1-create":             {{Key: "insertOne", Value: createDoc(name)}},
		"2-try-acquire":        acquire(acquireFilter(name), tryMode),
		"2-acquire":            acquire(acquireFilter(name), waitMode),
		"2-acquire-with-value": acquireWith(acquireFilter(name), waitMode, &leaderValue),
		"2a-acquire-unclaimed": {{Key: "findOneAndUpdate", Value: acquireFilter(name)},
			{Key: "update", Value: unclaimedPipeline(proc, owner, o.expiry, lockID, nil)},
			{Key: "returnDocument", Value: "after"}},
		"2a-acquire-unclaimed-with-value": {{Key: "findOneAndUpdate", Value: acquireFilter(name)},
			{Key: "update", Value: unclaimedPipeline(proc, owner, o.expiry, lockID, &leaderValue)},
			{Key: "returnDocument", Value: "after"}},
		"3-hand-over":                    acquire(ownerFilter(name, holding), handOverMode),
		"3-hand-over-with-value":         acquireWith(ownerFilter(name, holding), handOverMode, &leaderValue),
		"4-release":                      {{Key: "updateOne", Value: ownerFilter(name, holding)}, {Key: "update", Value: releaseUpdate}},
		"4a-release-holding":             {{Key: "updateOne", Value: ownerFilter(name, holding)}, {Key: "update", Value: holdReleaseUpdate(90 * time.Second)}},
		"5-extend":                       {{Key: "updateMany", Value: extendFilter(bson.A{name, "invoices"}, bson.A{holding, lockID})}, {Key: "update", Value: extendUpdate(o.expiry, 0)}},
		"5-extend-held-at-most":          {{Key: "updateMany", Value: extendFilter(bson.A{name, "invoices"}, bson.A{holding, lockID})}, {Key: "update", Value: extendUpdate(o.expiry, 10*time.Minute)}},
		"6-holders":                      {{Key: "find", Value: holders}, {Key: "projection", Value: projection}},
		"7-withdraw":                     {{Key: "updateOne", Value: withdrawFilter(name, proc)}, {Key: "update", Value: withdrawUpdate(proc)}},
		"8-ttl-index":                    {{Key: "createIndex", Value: ttlIndex().Keys}, {Key: "name", Value: *index.Name}, {Key: "expireAfterSeconds", Value: *index.ExpireAfterSeconds}},
		"8-ttl-read":                     {{Key: "listIndexes", Value: DefaultCollection}},
		"8-ttl-raise":                    raiseTTL(DefaultCollection),
		"9-watch":                        {{Key: "watch", Value: releaseEvents}},
		"10-inspect":                     {{Key: "aggregate", Value: inspectPipeline(acquireFilter(name))}},
		"11-list":                        {{Key: "aggregate", Value: listPipeline(name + "/")}, {Key: "batchSize", Value: listBatchSize}},
		"12-force-release":               {{Key: "updateOne", Value: forceReleaseFilter(name)}, {Key: "update", Value: forceReleaseUpdate}},
		"12-force-release-holder":        {{Key: "updateOne", Value: ownerFilter(name, holding)}, {Key: "update", Value: forceReleaseUpdate}},
		"13-proclaim":                    {{Key: "updateOne", Value: ownerFilter(name, holding)}, {Key: "update", Value: proclaimUpdate(leaderValue)}},
		"14-watch-leader":                {{Key: "watch", Value: leaderEvents(name)}},
		"15-semaphore-create":            {{Key: "insertOne", Value: createSemDoc(name, 3)}},
		"16-semaphore-try-acquire":       slotAcquire(3, 0, tryMode),
		"16-semaphore-acquire":           slotAcquire(3, 0, waitMode),
		"16-semaphore-hand-over":         slotAcquire(3, 0, handOverMode),
		"16-semaphore-units-try-acquire": unitsAcquire(3, 2, 0, tryMode),
		"16-semaphore-units-acquire":     unitsAcquire(3, 2, 0, waitMode),
		"16-semaphore-units-hand-over":   unitsAcquire(3, 2, 0, handOverMode),
		"16-rwlock-try-rlock":            slotAcquire(1, readMode, tryMode),
		"16-rwlock-rlock":                slotAcquire(1, readMode, waitMode),
		"16-rwlock-try-lock":             slotAcquire(1, writeMode, tryMode),
		"16-rwlock-lock":                 slotAcquire(1, writeMode, waitMode),
		"16-rwlock-hand-over":            slotAcquire(1, writeMode, handOverMode),
		"16-rwlock-read-hand-over":       slotAcquire(1, readMode, handOverMode),
		"16-rwlock-try-upgradeable":      slotAcquire(1, upgradeMode, tryMode),
		"16-rwlock-upgradeable":          slotAcquire(1, upgradeMode, waitMode),
		"17-semaphore-release":           {{Key: "updateOne", Value: semHolderFilter(name, holding)}, {Key: "update", Value: semReleaseUpdate(holding)}},
		"18-semaphore-extend":            {{Key: "updateMany", Value: semExtendFilter(bson.A{name, "invoices"}, bson.A{holding, lockID})}, {Key: "update", Value: semExtendUpdate(bson.A{holding, lockID}, o.expiry)}},
		"19-semaphore-holders":           {{Key: "find", Value: semHolders}, {Key: "projection", Value: semProjection}},
		"20-rwlock-create":               {{Key: "insertOne", Value: createRWDoc(name)}},
		"21-semaphore-inspect":           {{Key: "aggregate", Value: semInspectPipeline(acquireFilter(name))}},
		"22-semaphore-list":              {{Key: "aggregate", Value: semListPipeline(name + "/")}, {Key: "batchSize", Value: listBatchSize}},
		"23-semaphore-force-release":     {{Key: "updateOne", Value: semForceReleaseFilter(name)}, {Key: "update", Value: semForceReleaseUpdate}},
		"23-semaphore-force-release-holder": {{Key: "updateOne", Value: semHolderFilter(name, holding)},
			{Key: "update", Value: semForceReleaseHolderUpdate(holding)}},
		"24-rwlock-upgrade": {{Key: "findOneAndUpdate", Value: semHolderFilter(name, holding)},
			{Key: "update", Value: upgradePipeline(holding, lockID, o.claimLifetime())},
			{Key: "returnDocument", Value: "after"}, {Key: "fields", Value: upgradeReplyFields(holding)}},
		"25-rwlock-undo-upgrade": {{Key: "updateOne", Value: upgradeTagFilter(name, holding, lockID)}, {Key: "update", Value: holderModeUpdate(holding, upgradeMode)}},
		"26-rwlock-downgrade":    {{Key: "updateOne", Value: semHolderFilter(name, holding)}, {Key: "update", Value: holderModeUpdate(holding, readMode)}},
		"27-take-over": {{Key: "findOneAndUpdate", Value: ownerFilter(name, holding)},
			{Key: "update", Value: takeOverPipeline(proc, owner, o.expiry, lockID, nil, turnLength)}, {Key: "returnDocument", Value: "after"}},
		"27-take-over-with-value": {{Key: "findOneAndUpdate", Value: ownerFilter(name, holding)},
			{Key: "update", Value: takeOverPipeline(proc, owner, o.expiry, lockID, &leaderValue, electionTurn)}, {Key: "returnDocument", Value: "after"}},
		"28-semaphore-take-over": {{Key: "findOneAndUpdate", Value: semHolderFilter(name, holding)},
			{Key: "update", Value: slotTakeOverPipeline(lockID, holding, owner, o.expiry)},
			{Key: "returnDocument", Value: "after"}, {Key: "fields", Value: takeOverReplyFields(lockID)}},
	}
	for file, stmt := range statements {
		t.Run(file, func(t *testing.T) {
			got, err := bson.MarshalExtJSONIndent(stmt, true, false, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			path := filepath.Join("testdata", "protocol", file+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden file: run go test -run Golden -update")
			require.Equal(t, string(want), string(got), "%s differs from its golden file", file)
		})
	}
}

// The constant parts are encoded once per provider; an attempt's pipeline
// is what encoding it whole gives.
func TestAcquirePipelineEncodesAsBuiltWhole(t *testing.T) {
	id := newLockID()
	_, got, err := bson.MarshalValue(acquirePipeline(id, 42, nil, newAcquireParts(testAcquirer("p"))))
	require.NoError(t, err)
	_, want, err := bson.MarshalValue(builtWhole(id, "p"))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// testAcquirer is process proc's Acquire, as the tests of encoding build it.
func testAcquirer(proc string) acquirer {
	return acquirer{proc: proc, owner: "host/1", mode: waitMode, expiry: 30 * time.Second, claim: time.Second, next: time.Minute, turn: turnLength}
}

// builtWhole builds process proc's Acquire pipeline for lockId id as one
// value, with nothing encoded beforehand.
func builtWhole(id, proc string) bson.A {
	a := testAcquirer(proc)
	mine, free, stages := a.mine(), a.free(), a.stages()
	pipeline := bson.A{
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "_attempt", Value: bson.D{{Key: "lockId", Value: id}, {Key: "since", Value: int64(42)}}},
			{Key: "_mine", Value: mine},
			{Key: "_free", Value: free},
		}}},
	}
	for _, s := range stages {
		pipeline = append(pipeline, s)
	}
	return pipeline
}

// What encoding an attempt's pipeline costs the client: the constant parts
// encoded once per provider (what the library does), against building and
// encoding the whole pipeline per attempt.
func BenchmarkAcquirePipelineEncoding(b *testing.B) {
	proc, id := newLockID(), newLockID()
	b.Run("constant-parts-encoded-once", func(b *testing.B) {
		parts := newAcquireParts(testAcquirer(proc))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := bson.MarshalValue(acquirePipeline(id, 42, nil, parts)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("built-per-attempt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := bson.MarshalValue(builtWhole(id, proc)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
