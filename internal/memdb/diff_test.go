package memdb

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// doc is the document of a relaxed extended JSON text: 1 is an int32, 1.0
// a double.
func doc(t *testing.T, js string) bson.D {
	t.Helper()
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(js), false, &d); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return norm(d).(bson.D)
}

// The oplog diffs MongoDB computes of these documents, as its
// document_diff_calculator_test.cpp states them: which fields are diffed,
// which written whole, where a diff is too large to be one, and the order
// of the deletions.
func TestOplogDiffIsMongoDBs(t *testing.T) {
	for _, c := range []struct {
		pre, post string
		padding   int
		want      string // "": no diff, a replacement
	}{
		{`{"field1": 1}`, `{"field1": 1}`, 5, `{}`},
		{`{"field1": [{}]}`, `{"field1": [{}]}`, 5, `{}`},
		{`{"field1": null}`, `{"field1": null}`, 5, `{}`},
		{`{}`, `{}`, 0, ``},
		{`{"a": {"b": 1}}`, `{"a": {"b": 1}, "c": 1}`, 0, `{"i": {"c": 1}}`},
		{`{"a": {"b": 1}, "c": 1}`, `{"a": {"b": 1}, "c": 2}`, 0, `{"u": {"c": 2}}`},
		{`{"a": {"b": 1}, "c": 1}`, `{"a": {"b": 1}}`, 0, `{"d": {"c": false}}`},
		{`{"a": {}, "e": 1, "f": 1}`, `{"a": {"b": {"c": {"d": 1}}}, "e": 1, "f": 1}`, 0, `{"u": {"a": {"b": {"c": {"d": 1}}}}}`},
		{`{"a": 1, "g": 1, "h": 1}`, `{"a": {"b": 2, "c": [2], "d": {"e": 2}, "f": 1}, "g": 1, "h": 1}`, 0, `{"u": {"a": {"b": 2, "c": [2], "d": {"e": 2}, "f": 1}}}`},
		{`{"a": {"b": {"c": {"d": 1, "e": 1, "f": 1}}}}`, `{"a": {"b": {"c": {"d": 2, "e": 1, "f": 1}}}}`, 0, `{"sa": {"sb": {"sc": {"u": {"d": 2}}}}}`},
		{`{"a": {"b": {"c": {"d": [1], "e": 1, "f": 1}}}}`, `{"a": {"b": {"c": {"d": [2], "e": 1, "f": 1}}}}`, 0, `{"sa": {"sb": {"sc": {"u": {"d": [2]}}}}}`},
		{`{"a": {"b": {"c": {"d": 1}, "e": 1, "f": 1}}}`, `{"a": {"b": {"c": {}, "e": 1, "f": 1}}}`, 0, `{"sa": {"sb": {"u": {"c": {}}}}}`},
		{`{"a": 1, "b": 2, "c": 3}`, `{"A": 1, "B": 2, "C": 3}`, 0, ``},
		{`{"b": 1, "c": 1, "d": 1}`, `{"a": 1, "b": 1, "c": 1, "d": 1}`, 0, ``},
		{`{"b": [1, 2, 3]}`, `{}`, 0, ``},
		{`{}`, `{"b": {}}`, 0, ``},
		{`{"a": 1, "b": "valueString", "c": 3, "d": 4}`, `{"b": "valueString", "c": 3, "d": 4, "a": 1}`, 15, `{"i": {"a": 1}}`},
		{`{"b": 1, "a": 2, "c": 3, "d": 4, "e": "valueString"}`, `{"c": 3, "d": 4, "e": "valueString"}`, 15, `{"d": {"a": false, "b": false}}`},
		{`{"b": 1, "a": 2, "c": "value", "d": "valueString", "e": "valueString", "g": 1, "f": 1}`, `{"c": "value", "d": "valueString", "e": "valueString"}`, 15,
			`{"d": {"g": false, "f": false, "a": false, "b": false}}`},
		{`{"a": "valueString", "b": 2, "c": {"subField1": 1, "subField2": 3.0}, "d": 4}`, `{"a": "valueString", "b": 2, "c": {"subField1": 1, "subField2": 3}, "d": 4}`, 15,
			`{"sc": {"u": {"subField2": 3}}}`},
		{`{"a": "valueString", "b": 2, "c": {"subField1": 1, "subField2": 3}, "d": 4}`, `{"a": "valueString", "b": 2, "c": {"subField1": 1, "subField2": {"$numberLong": "3"}}, "d": 4}`, 15,
			`{"sc": {"u": {"subField2": {"$numberLong": "3"}}}}`},
		{`{"a": null}`, `{}`, 15, ``},
		{`{"a": 1, "b": 2, "c": {"p": 1, "q": 1, "s": 1, "r": 2}, "d": 4}`, `{"a": 1, "b": 2, "c": {"p": 1, "q": 1, "r": 2, "s": 1}, "d": 4}`, 10, `{"sc": {"i": {"s": 1}}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3]}`, `{"field1": "abcd", "field2": [1, 2, 3, 4]}`, 5, `{"sfield2": {"a": true, "u3": 4}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3, [[2]]]}`, `{"field1": "abcd", "field2": [1, 2, 3, [[4]]]}`, 0, `{"sfield2": {"a": true, "u3": [[4]]}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3, [1, "longString", [2], 4, 5, 6], 5, 5, 5]}`, `{"field1": "abcd", "field2": [1, 2, 3, [1, "longString", [4], 4], 5, 6]}`, 0,
			`{"sfield2": {"a": true, "l": 6, "s3": {"a": true, "l": 4, "u2": [4]}, "u5": 6}}`},
		{`{"": "1", "field2": [1, 2, 3, {"": {"": 1, "padding": "largeFieldValue"}}]}`, `{"": "2", "field2": [1, 2, 3, {"": {"": 2, "padding": "largeFieldValue"}}]}`, 15,
			`{"u": {"": "2"}, "sfield2": {"a": true, "s3": {"s": {"u": {"": 2}}}}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3, {"field3": ["veryLargeStringValueveryLargeStringValue", 2, 3, 4]}]}`,
			`{"field1": "abcd", "field2": [1, 2, 3, {"field3": ["veryLargeStringValueveryLargeStringValue", 2, 4, 3, 5]}]}`, 0,
			`{"sfield2": {"a": true, "s3": {"sfield3": {"a": true, "u2": 4, "u3": 3, "u4": 5}}}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3, {"field3": ["largeString", 2, 3, 4, 5]}]}`, `{"field1": "abcd", "field2": [1, 2, 3, {"field3": ["largeString", 2, 3, 5]}]}`, 15,
			`{"sfield2": {"a": true, "s3": {"sfield3": {"a": true, "l": 4, "u3": 5}}}}`},
		{`{"level1Field1": "abcd", "level1Field2": {"level2Field1": {"level3Field1": {"p": 1}, "level3Field2": {"q": 1}}, "level2Field2": 2}, "level1Field3": 3, "level1Field4": {"level2Field1": {"level3Field1": {"p": 1}, "level3Field2": {"q": 1}}}}`,
			`{"level1Field1": "abcd", "level1Field2": {"level2Field1": {"level3Field1": {"q": 1}, "level3Field2": {"q": 1}}, "level2Field2": 2}, "level1Field3": "3", "level1Field4": {"level2Field1": {"level3Field1": {"q": 1}, "level3Field2": {"q": 1}}}}`, 15,
			`{"u": {"level1Field3": "3"}, "slevel1Field2": {"slevel2Field1": {"u": {"level3Field1": {"q": 1}}}}, "slevel1Field4": {"slevel2Field1": {"u": {"level3Field1": {"q": 1}}}}}`},
		{`{"field1": "abcd", "field2": [1, 2, 3, {"field3": [2, 3, 4, 5]}]}`, `{"field1": "abcd", "field2": [1, 2, 3, {"field3": [1, 2, 3, 4, 5]}]}`, 15,
			`{"sfield2": {"a": true, "u3": {"field3": [1, 2, 3, 4, 5]}}}`},
		{`{"field1": [1, 2, 3, 4, 5, 6, {"a": 1, "b": 2, "c": 3, "d": 4}, 7]}`, `{"field1": [1, 2, 3, 4, 5, 6, {"p": 1, "q": 2}, 7]}`, 0, `{"sfield1": {"a": true, "u6": {"p": 1, "q": 2}}}`},
		{`{"field": {"p": "someString", "q": 2, "r": {"a": 1, "b": 2, "c": 3, "d": 4}, "s": 3}}`, `{"field": {"p": "someString", "q": 2, "r": {"p": 1, "q": 2}, "s": 3}}`, 0,
			`{"sfield": {"u": {"r": {"p": 1, "q": 2}}}}`},
		{`{"field": {"p": "someString", "q": 2, "r": [1, 3, 4, 5], "s": 3}}`, `{"field": {"p": "someString", "q": 2, "r": [1, 2, 3, 4], "s": 3}}`, 0, `{"sfield": {"u": {"r": [1, 2, 3, 4]}}}`},
	} {
		d := oplogDiff(doc(t, c.pre), doc(t, c.post), c.padding)
		switch {
		case c.want == "" && d != nil:
			t.Errorf("%s to %s: diff %v, want none (a replacement)", c.pre, c.post, d.serialize())
		case c.want == "":
		case d == nil:
			t.Errorf("%s to %s: no diff, want %s", c.pre, c.post, c.want)
		case !bytes.Equal(encode(d.serialize()), encode(doc(t, c.want))):
			t.Errorf("%s to %s: diff %v, want %s", c.pre, c.post, d.serialize(), c.want)
		}
	}
}

// An update event's description reads the diff as MongoDB's change
// streams do: dotted paths into embedded documents and arrays, a delete
// per removed field, an array that shrank in truncatedArrays, new elements
// by index.
func TestPipelineUpdateEventDescribesTheDiff(t *testing.T) {
	pre := doc(t, `{"_id": "s", "holders": [{"id": "a", "expiresAt": 1, "upgrade": "t"}, {"id": "b", "expiresAt": 1}, {"id": "c", "expiresAt": 1}],
		"q": ["first", "a long second element", "c"], "owner": "a host of a long name", "gone": "x", "lastWrite": "extend"}`)
	post := doc(t, `{"_id": "s", "holders": [{"id": "a", "expiresAt": 1}, {"id": "b", "expiresAt": 1}, {"id": "c", "expiresAt": 2}],
		"q": ["x", "a long second element"], "owner": "a host of a long name", "lastWrite": "release", "releasedAt": 5}`)
	op, desc := Events8.pipelineEvent(pre, post)
	want := doc(t, `{"updatedFields": {"lastWrite": "release", "releasedAt": 5, "holders.2.expiresAt": 2, "q.0": "x"},
		"removedFields": ["gone", "holders.0.upgrade"], "truncatedArrays": [{"field": "q", "newSize": 2}]}`)
	if op != "update" || !bytes.Equal(encode(desc), encode(want)) {
		t.Fatalf("%s %v, want update %v", op, desc, want)
	}
	if op, desc := Events44.pipelineEvent(pre, post); op != "replace" || desc != nil {
		t.Fatalf("4.4: %s %v, want replace", op, desc)
	}
	// Each field written anew: the diff is larger than the document.
	if op, _ := Events8.pipelineEvent(doc(t, `{"_id": "s", "a": 1, "b": 2}`), doc(t, `{"_id": "s", "A": 1, "B": 2}`)); op != "replace" {
		t.Fatalf("every field renamed: %s, want replace", op)
	}
}

// valueSize is the size of the value's BSON, byte for byte.
func TestValueSizeIsTheBSONSize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) any
	value = func(depth int) any {
		switch n := r.IntN(9); {
		case n == 0:
			return nil
		case n == 1:
			return r.IntN(2) == 0
		case n == 2:
			return int32(r.Int())
		case n == 3:
			return int64(r.Int())
		case n == 4:
			return r.Float64()
		case n == 5:
			return bson.NewDateTimeFromTime(time.UnixMilli(r.Int64N(1 << 42)))
		case n == 6 || depth > 3:
			return string(make([]byte, r.IntN(20)))
		case n == 7:
			d := bson.D{}
			for i := range r.IntN(12) {
				d = append(d, bson.E{Key: "k" + strconv.Itoa(i*r.IntN(1000)), Value: value(depth + 1)})
			}
			return d
		}
		a := bson.A{}
		for range r.IntN(12) {
			a = append(a, value(depth+1))
		}
		return a
	}
	for range 1000 {
		v := value(0)
		if got, want := valueSize(bson.D{{Key: "v", Value: v}}), len(encode(bson.D{{Key: "v", Value: v}})); got != want {
			t.Fatalf("valueSize of {v: %v} = %d, its BSON has %d bytes", v, got, want)
		}
	}
}

// events drains s.
func events(t *testing.T, s *Stream) []bson.Raw {
	t.Helper()
	var out []bson.Raw
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev == nil {
			return out
		}
		out = append(out, ev)
	}
}

// An update document's event lists each field it wrote, whole, in the
// order applied (by name): on 8.0 those that were there first, then those
// it created; on 4.4 in that order alone. A $currentDate field is written
// even where it had that value already: the update is not a no-op, and
// the field is listed, on both.
func TestUpdateDocumentEventListsItsFieldsAndEveryCurrentDate(t *testing.T) {
	now := time.UnixMilli(1_790_000_000_000)
	for _, form := range []Events{Events8, Events44} {
		t.Run(form.String(), func(t *testing.T) {
			c := Table{Events: form}
			if err := c.InsertOne(now, bson.D{{Key: "_id", Value: "s"}, {Key: "z", Value: "old"}, {Key: "gone", Value: true}}); err != nil {
				t.Fatal(err)
			}
			s, err := c.Watch(nil)
			if err != nil {
				t.Fatal(err)
			}
			u := bson.D{{Key: "$set", Value: bson.D{{Key: "z", Value: "new"}, {Key: "a", Value: int32(1)}}},
				{Key: "$unset", Value: bson.D{{Key: "gone", Value: ""}}}, {Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}}
			again := bson.D{{Key: "$set", Value: bson.D{{Key: "z", Value: "new"}}}, {Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}}
			for i, u := range []bson.D{u, again} {
				if matched, modified, err := c.UpdateOne(now, bson.D{{Key: "_id", Value: "s"}}, u); err != nil || matched != 1 || modified != 1 {
					t.Fatalf("update %d: matched %d, modified %d, %v; want 1, 1", i, matched, modified, err)
				}
			}
			got := events(t, s)
			want := []string{
				`{"updatedFields": {"z": "new","a": {"$numberInt":"1"},"at": {"$date":{"$numberLong":"1790000000000"}}},"removedFields": ["gone"],"truncatedArrays": []}`,
				`{"updatedFields": {"at": {"$date":{"$numberLong":"1790000000000"}}},"removedFields": [],"truncatedArrays": []}`,
			}
			if form == Events44 {
				want[0] = `{"updatedFields": {"a": {"$numberInt":"1"},"at": {"$date":{"$numberLong":"1790000000000"}},"z": "new"},"removedFields": ["gone"]}`
				want[1] = `{"updatedFields": {"at": {"$date":{"$numberLong":"1790000000000"}}},"removedFields": []}`
			}
			if len(got) != 2 {
				t.Fatalf("%d events, want 2", len(got))
			}
			for i, ev := range got {
				if desc := ev.Lookup("updateDescription").Document().String(); desc != want[i] {
					t.Errorf("update %d: %s, want %s", i, desc, want[i])
				}
			}
		})
	}
}
