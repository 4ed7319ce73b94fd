package memdb

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A $map whose in is missing for an element puts null in its place, as
// MongoDB does (an array holds no missing value): in a reply and in a
// stored document.
func TestMapOfAMissingValueIsNull(t *testing.T) {
	var c Table
	now := time.Now()
	if err := c.InsertOne(now, bson.D{{Key: "_id", Value: "a"}, {Key: "arr", Value: bson.A{int32(1), int32(2)}}}); err != nil {
		t.Fatal(err)
	}
	mapped := bson.D{{Key: "$map", Value: bson.D{{Key: "input", Value: "$arr"},
		{Key: "in", Value: bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$eq", Value: bson.A{"$$this", 1}}}, "$$REMOVE", "$$this"}}}}}}}
	want := `{"_id": "a","m": [null,{"$numberInt":"2"}]}`
	docs, err := c.Aggregate(now, bson.A{bson.D{{Key: "$project", Value: bson.D{{Key: "m", Value: mapped}}}}})
	if err != nil || len(docs) != 1 || docs[0].String() != want {
		t.Fatalf("aggregate: %v, %v; want %s", docs, err, want)
	}
	if _, _, err := c.UpdateOne(now, bson.D{{Key: "_id", Value: "a"}}, bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: mapped}}}}}); err != nil {
		t.Fatal(err)
	}
	if got := c.Docs()[0].Lookup("m").String(); got != `[null,{"$numberInt":"2"}]` {
		t.Fatalf("stored %s, want [null, 2]", got)
	}
}

// A $map without in or input, a $filter without cond or input, is refused
// as MongoDB refuses it when it parses the statement, with its code and
// message: whether or not a document matches, the array is empty, or the
// branch that holds it is taken. An update's refusal is a write error, a
// findAndModify's or an aggregate's the command's.
func TestMapWithoutInAndFilterWithoutCondAreRefusedAsMongoDBRefusesThem(t *testing.T) {
	var c Table
	now := time.Now()
	if err := c.InsertOne(now, bson.D{{Key: "_id", Value: "a"}, {Key: "arr", Value: bson.A{}}}); err != nil {
		t.Fatal(err)
	}
	untaken := func(x bson.D) bson.D { return bson.D{{Key: "$cond", Value: bson.A{false, x, "$arr"}}} }
	for _, r := range []struct {
		expr bson.D
		code int32
		msg  string
	}{
		{bson.D{{Key: "$map", Value: bson.D{{Key: "input", Value: "$arr"}}}}, 16882, "Missing 'in' parameter to $map"},
		{bson.D{{Key: "$map", Value: bson.D{{Key: "in", Value: "$$this"}}}}, 16880, "Missing 'input' parameter to $map"},
		{bson.D{{Key: "$filter", Value: bson.D{{Key: "input", Value: "$arr"}}}}, 28650, "Missing 'cond' parameter to $filter"},
		{bson.D{{Key: "$filter", Value: bson.D{{Key: "cond", Value: true}}}}, 28648, "Missing 'input' parameter to $filter"},
	} {
		set := bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: untaken(r.expr)}}}}}
		none := bson.D{{Key: "_id", Value: "none"}}
		check := func(what string, err error, write bool) {
			t.Helper()
			var code int32
			var msg string
			var ce mongo.CommandError
			var we mongo.WriteException
			switch {
			case !write && errors.As(err, &ce):
				code, msg = ce.Code, ce.Message
			case write && errors.As(err, &we) && len(we.WriteErrors) == 1:
				code, msg = int32(we.WriteErrors[0].Code), we.WriteErrors[0].Message
			default:
				t.Fatalf("%v, %s: got %v, want the server's error", r.expr, what, err)
			}
			if code != r.code || msg != "Invalid $set :: caused by :: "+r.msg {
				t.Errorf("%v, %s: code %d %q, want %d %q", r.expr, what, code, msg, r.code, r.msg)
			}
		}
		_, err := c.FindOneAndUpdate(now, none, set, FindOneAndUpdateOptions{})
		check("findAndModify, no match", err, false)
		_, _, err = c.UpdateOne(now, none, set)
		check("update, no match", err, true)
		_, _, err = c.UpdateMany(now, bson.D{}, set)
		check("update, a match", err, true)
		_, err = c.Aggregate(now, bson.A{bson.D{{Key: "$match", Value: none}}, set[0]})
		check("aggregate", err, false)
		if got := c.Docs()[0].String(); strings.Contains(got, `"m"`) {
			t.Fatalf("%v: a refused update wrote %s", r.expr, got)
		}
	}
}
