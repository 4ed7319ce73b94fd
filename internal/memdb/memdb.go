// Package memdb is an in-memory model of a MongoDB collection as mongolock
// uses one: documents keyed by _id; the operations, query operators,
// update operators, pipeline stages and aggregation expressions of the
// library's statements, evaluated as MongoDB documents them; the change
// events each write produces; and, in a Store, the faults of a network
// between a client and the server. $$NOW is an argument of every
// operation: the store's clock, to the millisecond.
//
// It models that subset and nothing more: a statement that uses anything
// else is answered with an error that names what is not modelled, never
// with a guess. A differential test in the root package runs every
// statement the library sends on the test server and on this model and
// requires the same documents and replies. Not modelled: indexes other
// than _id's (a TTL monitor's deletions are the caller's DeleteOne, at
// the time it chooses), server errors of invalid statements, and the
// driver (its retries, its server selection, its sessions).
package memdb

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ErrNotModelled is wrapped by every error about an operator, stage or
// value the model does not evaluate.
var ErrNotModelled = errors.New("memdb: not modelled")

// unmodelled is panicked with inside the model and recovered at its
// surface: the evaluation reads straight, and no wrong answer escapes.
type unmodelled struct{ what string }

func notModelled(format string, args ...any) unmodelled {
	return unmodelled{fmt.Sprintf(format, args...)}
}

func guard(err *error) {
	if r := recover(); r != nil {
		u, ok := r.(unmodelled)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("%w: %s", ErrNotModelled, u.what)
	}
}

// Collection is one collection's documents, in insertion order (the order
// a find without a sort returns them), and its open change streams. It is
// not safe for concurrent use: a Store is.
type Collection struct {
	DB, Name string // the namespace its change events name
	docs     []bson.D
	streams  []*Stream
	seq      uint32 // events so far
}

// norm turns a statement's part (bson.D, bson.Raw, bson.A,
// mongo.Pipeline, …) into the tree of bson.D, bson.A and scalars that the
// model evaluates, as the server would receive it. The library's
// statements are trees of bson.D, bson.A and a few scalars: those are
// copied as the driver would encode them and decode them back, and
// anything else goes through the encoder (the round trip costs most of a
// simulation's time).
func norm(v any) any {
	switch v := v.(type) {
	case nil, string, bool, int32, int64, float64, bson.DateTime:
		return v
	case int:
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			return int32(v)
		}
		return int64(v)
	case time.Time:
		return bson.NewDateTimeFromTime(v)
	case bson.D:
		if v == nil {
			break
		}
		out := make(bson.D, len(v))
		for i, e := range v {
			out[i] = bson.E{Key: e.Key, Value: norm(e.Value)}
		}
		return out
	case bson.A:
		if v == nil {
			break
		}
		out := make(bson.A, len(v))
		for i, e := range v {
			out[i] = norm(e)
		}
		return out
	case bson.Raw:
		if d, ok := rawDoc(v); ok {
			return d
		}
	case mongo.Pipeline:
		if v == nil {
			break
		}
		out := make(bson.A, len(v))
		for i, e := range v {
			out[i] = norm(e)
		}
		return out
	}
	return encoded(v)
}

// rawDoc decodes the document raw as bson.Unmarshal would into a bson.D,
// if it holds only documents, arrays and the scalars norm copies; ok is
// false otherwise.
func rawDoc(raw bson.Raw) (d bson.D, ok bool) {
	elems, err := raw.Elements()
	if err != nil {
		return nil, false
	}
	d = make(bson.D, 0, len(elems))
	for _, e := range elems {
		v, ok := rawValue(e.Value())
		if !ok {
			return nil, false
		}
		d = append(d, bson.E{Key: e.Key(), Value: v})
	}
	return d, true
}

func rawValue(rv bson.RawValue) (any, bool) {
	switch rv.Type {
	case bson.TypeEmbeddedDocument:
		return rawDoc(rv.Document())
	case bson.TypeArray:
		vals, err := rv.Array().Values()
		if err != nil {
			return nil, false
		}
		a := make(bson.A, len(vals))
		for i, v := range vals {
			var ok bool
			if a[i], ok = rawValue(v); !ok {
				return nil, false
			}
		}
		return a, true
	case bson.TypeString:
		return rv.StringValue(), true
	case bson.TypeInt32:
		return rv.Int32(), true
	case bson.TypeInt64:
		return rv.Int64(), true
	case bson.TypeDouble:
		return rv.Double(), true
	case bson.TypeBoolean:
		return rv.Boolean(), true
	case bson.TypeNull:
		return nil, true
	case bson.TypeDateTime:
		return bson.DateTime(rv.DateTime()), true
	}
	return nil, false
}

// encoded is v encoded as the driver does, and decoded back.
func encoded(v any) any {
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	var d bson.D
	if err == nil {
		err = bson.Unmarshal(raw, &d)
	}
	if err != nil {
		panic(notModelled("value %T: %v", v, err))
	}
	return d[0].Value
}

func encode(d bson.D) bson.Raw {
	raw, err := bson.Marshal(d)
	if err != nil {
		panic(notModelled("document: %v", err))
	}
	return raw
}

func (c *Collection) matching(filter any) []int {
	f := asDoc(norm(filter), "filter")
	var out []int
	for i, d := range c.docs {
		if matches(d, f) {
			out = append(out, i)
		}
	}
	return out
}

// Docs returns the documents, in insertion order.
func (c *Collection) Docs() []bson.Raw {
	out := make([]bson.Raw, len(c.docs))
	for i, d := range c.docs {
		out[i] = encode(d)
	}
	return out
}

// InsertOne inserts doc, which has an _id; a document with the same _id
// gives a duplicate key error, as mongo.IsDuplicateKeyError recognises it.
func (c *Collection) InsertOne(now time.Time, doc any) (err error) {
	defer guard(&err)
	d := asDoc(norm(doc), "document")
	id := get(d, "_id")
	if id == missing {
		panic(notModelled("insert without _id"))
	}
	// compare: strings byte by byte (the simple collation); 1 and 1.0 are
	// the same key, as in a unique index.
	if slices.ContainsFunc(c.docs, func(x bson.D) bool { return equal(get(x, "_id"), id) }) {
		return mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000, Message: fmt.Sprintf("E11000 duplicate key error: _id %v", id)}}}
	}
	c.docs = append(c.docs, d)
	c.emit(now, "insert", d, d, nil)
	return nil
}

// FindOneAndUpdateOptions are the options of FindOneAndUpdate.
type FindOneAndUpdateOptions struct {
	After      bool // return the document after the update, else before
	Projection any  // nil: the whole document
}

// FindOneAndUpdate updates the first document filter matches, and returns
// it (mongo.ErrNoDocuments if none). update is an update document
// ($set, …) or a pipeline.
func (c *Collection) FindOneAndUpdate(now time.Time, filter, update any, o FindOneAndUpdateOptions) (doc bson.Raw, err error) {
	defer guard(&err)
	hits := c.matching(filter)
	if len(hits) == 0 {
		return nil, mongo.ErrNoDocuments
	}
	out := c.docs[hits[0]]
	c.update(now, hits[0], update)
	if o.After {
		out = c.docs[hits[0]]
	}
	if o.Projection != nil {
		out = project(out, asDoc(norm(o.Projection), "projection"), bson.NewDateTimeFromTime(now))
	}
	return encode(out), nil
}

// UpdateOne updates the first document filter matches: it reports how
// many matched and how many changed (0 when the update left it as it was).
func (c *Collection) UpdateOne(now time.Time, filter, update any) (matched, modified int, err error) {
	defer guard(&err)
	hits := c.matching(filter)
	return c.updateAll(now, hits[:min(1, len(hits))], update)
}

// UpdateMany updates every document filter matches.
func (c *Collection) UpdateMany(now time.Time, filter, update any) (matched, modified int, err error) {
	defer guard(&err)
	return c.updateAll(now, c.matching(filter), update)
}

func (c *Collection) updateAll(now time.Time, hits []int, update any) (matched, modified int, err error) {
	for _, i := range hits {
		if c.update(now, i, update) {
			modified++
		}
	}
	return len(hits), modified, nil
}

// update applies update to document i, and reports whether it changed
// it. A change is an event: a pipeline's, a replace (as MongoDB 4.4
// always reports it, and later ones when the diff is larger than the
// document); an update document's, an update with its changed fields.
func (c *Collection) update(now time.Time, i int, update any) bool {
	before, u := c.docs[i], norm(update)
	t := bson.NewDateTimeFromTime(now)
	var after bson.D
	switch u := u.(type) {
	case bson.A:
		after = slices.Clone(before)
		for _, s := range u {
			st := stageOf(s)
			if st.Key == "$match" || st.Key == "$sort" {
				panic(notModelled("update stage %s", st.Key))
			}
			after = stage([]bson.D{after}, st, t)[0]
		}
	case bson.D:
		after = applyOperators(before, u, t)
	default:
		panic(notModelled("update of type %T", update))
	}
	if id := get(before, "_id"); get(after, "_id") == missing || !equal(get(after, "_id"), id) {
		panic(notModelled("an update that changes _id"))
	}
	if bytes.Equal(encode(before), encode(after)) {
		return false
	}
	c.docs[i] = after
	if _, pipeline := u.(bson.A); pipeline {
		c.emit(now, "replace", after, after, nil)
	} else {
		c.emit(now, "update", after, nil, changes(before, after))
	}
	return true
}

// DeleteOne deletes the first document filter matches, and reports
// whether there was one.
func (c *Collection) DeleteOne(now time.Time, filter any) (deleted bool, err error) {
	defer guard(&err)
	hits := c.matching(filter)
	if len(hits) == 0 {
		return false, nil
	}
	d := c.docs[hits[0]]
	c.docs = slices.Delete(c.docs, hits[0], hits[0]+1)
	c.emit(now, "delete", d, nil, nil)
	return true, nil
}

// Find returns the documents filter matches, in insertion order, with
// projection applied (nil: whole).
func (c *Collection) Find(now time.Time, filter, projection any) (docs []bson.Raw, err error) {
	defer guard(&err)
	for _, i := range c.matching(filter) {
		d := c.docs[i]
		if projection != nil {
			d = project(d, asDoc(norm(projection), "projection"), bson.NewDateTimeFromTime(now))
		}
		docs = append(docs, encode(d))
	}
	return docs, nil
}

// Aggregate runs pipeline over the collection's documents.
func (c *Collection) Aggregate(now time.Time, pipeline any) (docs []bson.Raw, err error) {
	defer guard(&err)
	cur := slices.Clone(c.docs)
	for _, s := range array(norm(pipeline), "pipeline") {
		cur = stage(cur, stageOf(s), bson.NewDateTimeFromTime(now))
	}
	for _, d := range cur {
		docs = append(docs, encode(d))
	}
	return docs, nil
}

func stageOf(s any) bson.E {
	d, ok := s.(bson.D)
	if !ok || len(d) != 1 {
		panic(notModelled("pipeline stage %v", s))
	}
	return d[0]
}

// stage applies a stage of an aggregation or of an update's pipeline.
func stage(docs []bson.D, s bson.E, now bson.DateTime) []bson.D {
	spec, _ := s.Value.(bson.D)
	switch s.Key {
	case "$match":
		return slices.DeleteFunc(docs, func(d bson.D) bool { return !matches(d, asDoc(s.Value, s.Key)) })
	case "$sort":
		slices.SortStableFunc(docs, func(a, b bson.D) int {
			for _, k := range spec {
				if dir, _ := integer(k.Value); dir != 1 && dir != -1 {
					panic(notModelled("$sort direction %v", k.Value))
				} else if c := compare(orNull(get(a, k.Key)), orNull(get(b, k.Key))); c != 0 {
					return c * int(dir)
				}
			}
			return 0
		})
		return docs
	}
	out := make([]bson.D, len(docs))
	for i, d := range docs {
		c := &evalCtx{now: now, root: d}
		switch s.Key {
		case "$set":
			out[i] = setFields(d, asDoc(s.Value, s.Key), c)
		case "$replaceWith":
			out[i] = asDoc(eval(s.Value, c), s.Key)
		case "$project":
			out[i] = project(d, asDoc(s.Value, s.Key), now)
		default:
			panic(notModelled("stage %s", s.Key))
		}
	}
	return out
}

// orNull: a sort sees a missing field as null.
func orNull(v any) any {
	if v == missing {
		return nil
	}
	return v
}

// setFields is $set: every expression is evaluated on the document as the
// stage found it; an existing field keeps its place, a new one is appended,
// and a missing value ($$REMOVE) removes the field.
func setFields(d bson.D, spec bson.D, c *evalCtx) bson.D {
	out := slices.Clone(d)
	for _, e := range spec {
		sub, literal := e.Value.(bson.D)
		switch get(d, e.Key).(type) {
		case bson.D, bson.A:
			if literal && !isOperator(sub) { // it would be merged into each
				panic(notModelled("$set of an object on an embedded %q", e.Key))
			}
		}
		if strings.ContainsAny(e.Key, ".$") {
			panic(notModelled("$set of path %q", e.Key))
		}
		out = put(out, e.Key, eval(e.Value, c))
	}
	return out
}

// put sets field k of d to v in place, appends it if new, removes it if v
// is missing.
func put(d bson.D, k string, v any) bson.D {
	i := slices.IndexFunc(d, func(e bson.E) bool { return e.Key == k })
	switch {
	case v == missing && i >= 0:
		return slices.Delete(d, i, i+1)
	case v == missing:
		return d
	case i >= 0:
		d[i].Value = v
		return d
	}
	return append(d, bson.E{Key: k, Value: v})
}

// applyOperators applies an update document. The server applies the
// fields in lexicographic order of their names (MongoDB 5.0 on): that is
// the order in which new fields are appended.
func applyOperators(d bson.D, u bson.D, now bson.DateTime) bson.D {
	var changes []bson.E // field, {op: arg}
	for _, o := range u {
		for _, f := range asDoc(o.Value, o.Key) {
			changes = append(changes, bson.E{Key: f.Key, Value: bson.E{Key: o.Key, Value: f.Value}})
		}
	}
	slices.SortStableFunc(changes, func(a, b bson.E) int { return strings.Compare(a.Key, b.Key) })
	out := slices.Clone(d)
	for i, ch := range changes {
		op, arg := ch.Value.(bson.E).Key, ch.Value.(bson.E).Value
		if strings.Contains(ch.Key, ".") || ch.Key == "_id" || i > 0 && changes[i-1].Key == ch.Key {
			panic(notModelled("%s of %q", op, ch.Key))
		}
		switch op {
		case "$set":
			out = put(out, ch.Key, arg)
		case "$unset":
			out = put(out, ch.Key, missing)
		case "$currentDate":
			if arg != true {
				panic(notModelled("$currentDate %v", arg))
			}
			out = put(out, ch.Key, now)
		case "$pull":
			if arr, ok := get(out, ch.Key).(bson.A); ok {
				q := asDoc(arg, "$pull")
				if isOperator(q) {
					panic(notModelled("$pull condition %v", q))
				}
				kept := bson.A{}
				for _, el := range arr {
					if doc, ok := el.(bson.D); !ok || !matches(doc, q) {
						kept = append(kept, el)
					}
				}
				out = put(out, ch.Key, kept)
			} else if get(out, ch.Key) != missing {
				panic(notModelled("$pull from a %s", typeName(get(out, ch.Key))))
			}
		default:
			panic(notModelled("update operator %s", op))
		}
	}
	return out
}

func asDoc(v any, what string) bson.D {
	d, ok := v.(bson.D)
	if !ok {
		panic(notModelled("%s of %T", what, v))
	}
	return d
}

func isOperator(d bson.D) bool { return len(d) > 0 && strings.HasPrefix(d[0].Key, "$") }

// get is field k of d, or missing.
func get(d bson.D, k string) any {
	if i := slices.IndexFunc(d, func(e bson.E) bool { return e.Key == k }); i >= 0 {
		return d[i].Value
	}
	return missing
}
