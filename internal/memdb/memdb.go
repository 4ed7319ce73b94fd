// Package memdb is an in-memory model of a MongoDB collection as mongolock
// uses one: documents keyed by _id, and the operations, query operators,
// update operators, pipeline stages and aggregation expressions of the
// library's statements, evaluated as MongoDB documents them. $$NOW is an
// argument of every operation: the store's clock, to the millisecond.
//
// It models that subset and nothing more: a statement that uses anything
// else is answered with an error that names what is not modelled, never
// with a guess. A differential test in the root package runs every
// statement the library sends on the test server and on this model and
// requires the same documents and replies.
package memdb

import (
	"bytes"
	"errors"
	"fmt"
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

// failure is a server error the model reproduces (a $size of a non-array,
// an _id changed by an update): an operation error, not a gap.
type failure struct{ msg string }

func (f failure) Error() string { return "memdb: " + f.msg }

func guard(err *error) {
	switch r := recover().(type) {
	case nil:
	case unmodelled:
		*err = fmt.Errorf("%w: %s", ErrNotModelled, r.what)
	case failure:
		*err = r
	default:
		panic(r)
	}
}

// Collection is one collection's documents, in insertion order (the order
// a find without a sort returns them). It is not safe for concurrent use.
type Collection struct {
	docs []bson.D
}

// norm turns a statement's part (bson.D, bson.Raw, bson.A,
// mongo.Pipeline, …) into the tree of bson.D, bson.A and scalars that the
// model evaluates, as the server would receive it.
func norm(v any) any {
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		panic(notModelled("value %T: %v", v, err))
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		panic(notModelled("value %T: %v", v, err))
	}
	return d[0].Value
}

func normDoc(v any) bson.D {
	d, ok := norm(v).(bson.D)
	if !ok {
		panic(notModelled("%T where a document is expected", v))
	}
	return d
}

func encode(d bson.D) bson.Raw {
	raw, err := bson.Marshal(d)
	if err != nil {
		panic(notModelled("document: %v", err))
	}
	return raw
}

func (c *Collection) indexOf(id any) int {
	// compare: strings byte by byte (the simple collation); 1 and 1.0 are
	// the same key, as in a unique index.
	return slices.IndexFunc(c.docs, func(d bson.D) bool { return compare(get(d, "_id"), id) == 0 })
}

func (c *Collection) matching(now bson.DateTime, filter bson.D) []int {
	var out []int
	for i, d := range c.docs {
		if matches(d, filter, now) {
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
func (c *Collection) InsertOne(doc any) (err error) {
	defer guard(&err)
	d := normDoc(doc)
	id := get(d, "_id")
	if id == missing {
		panic(notModelled("insert without _id"))
	}
	if c.indexOf(id) >= 0 {
		return mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000, Message: fmt.Sprintf("E11000 duplicate key error: _id %v", id)}}}
	}
	c.docs = append(c.docs, d)
	return nil
}

// FindOneAndUpdateOptions are the options of FindOneAndUpdate.
type FindOneAndUpdateOptions struct {
	Upsert     bool
	After      bool // return the document after the update, else before
	Projection any  // nil: the whole document
}

// FindOneAndUpdate updates the first document filter matches, and returns
// it (mongo.ErrNoDocuments if none). update is an update document
// ($set, …) or a pipeline.
func (c *Collection) FindOneAndUpdate(now time.Time, filter, update any, o FindOneAndUpdateOptions) (doc bson.Raw, err error) {
	defer guard(&err)
	t := bson.NewDateTimeFromTime(now)
	f := normDoc(filter)
	var before, after bson.D
	if hits := c.matching(t, f); len(hits) > 0 {
		before = c.docs[hits[0]]
		after = apply(before, update, t)
		c.docs[hits[0]] = after
	} else if o.Upsert {
		after = apply(upsertSeed(f), update, t)
		c.docs = append(c.docs, after)
	}
	out := before
	if o.After {
		out = after
	}
	if out == nil {
		return nil, mongo.ErrNoDocuments
	}
	if o.Projection != nil {
		out = project(out, normDoc(o.Projection), t)
	}
	return encode(out), nil
}

// upsertSeed is the document an upsert starts from: the filter's equality
// conditions on top-level fields.
func upsertSeed(filter bson.D) bson.D {
	var d bson.D
	for _, e := range filter {
		if sub, ok := e.Value.(bson.D); (ok && isOperator(sub)) || strings.HasPrefix(e.Key, "$") || strings.Contains(e.Key, ".") {
			continue
		}
		d = append(d, e)
	}
	return d
}

// UpdateOne updates the first document filter matches: it reports how
// many matched and how many changed (0 when the update left it as it was).
func (c *Collection) UpdateOne(now time.Time, filter, update any) (matched, modified int, err error) {
	return c.update(now, filter, update, false)
}

// UpdateMany updates every document filter matches.
func (c *Collection) UpdateMany(now time.Time, filter, update any) (matched, modified int, err error) {
	return c.update(now, filter, update, true)
}

func (c *Collection) update(now time.Time, filter, update any, many bool) (matched, modified int, err error) {
	defer guard(&err)
	t := bson.NewDateTimeFromTime(now)
	hits := c.matching(t, normDoc(filter))
	if !many && len(hits) > 1 {
		hits = hits[:1]
	}
	for _, i := range hits {
		after := apply(c.docs[i], update, t)
		if !bytes.Equal(encode(after), encode(c.docs[i])) {
			modified++
		}
		c.docs[i] = after
	}
	return len(hits), modified, nil
}

// DeleteOne deletes the first document filter matches, and reports
// whether there was one.
func (c *Collection) DeleteOne(now time.Time, filter any) (deleted bool, err error) {
	defer guard(&err)
	hits := c.matching(bson.NewDateTimeFromTime(now), normDoc(filter))
	if len(hits) == 0 {
		return false, nil
	}
	c.docs = slices.Delete(c.docs, hits[0], hits[0]+1)
	return true, nil
}

// Find returns the documents filter matches, in insertion order, with
// projection applied (nil: whole).
func (c *Collection) Find(now time.Time, filter, projection any) (docs []bson.Raw, err error) {
	defer guard(&err)
	t := bson.NewDateTimeFromTime(now)
	for _, i := range c.matching(t, normDoc(filter)) {
		d := c.docs[i]
		if projection != nil {
			d = project(d, normDoc(projection), t)
		}
		docs = append(docs, encode(d))
	}
	return docs, nil
}

// Aggregate runs pipeline over the collection's documents.
func (c *Collection) Aggregate(now time.Time, pipeline any) (docs []bson.Raw, err error) {
	defer guard(&err)
	t := bson.NewDateTimeFromTime(now)
	stages, ok := norm(pipeline).(bson.A)
	if !ok {
		panic(notModelled("pipeline of type %T", pipeline))
	}
	cur := slices.Clone(c.docs)
	for _, s := range stages {
		cur = aggregateStage(cur, stageOf(s), t)
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

func aggregateStage(docs []bson.D, s bson.E, now bson.DateTime) []bson.D {
	switch s.Key {
	case "$match":
		f := asDoc(s.Value, "$match")
		return slices.DeleteFunc(docs, func(d bson.D) bool { return !matches(d, f, now) })
	case "$sort":
		spec := asDoc(s.Value, "$sort")
		slices.SortStableFunc(docs, func(a, b bson.D) int {
			for _, k := range spec {
				dir := 1
				if n, ok := number(k.Value); !ok || (n != 1 && n != -1) {
					panic(notModelled("$sort direction %v", k.Value))
				} else if n == -1 {
					dir = -1
				}
				if c := compare(sortKey(get(a, k.Key)), sortKey(get(b, k.Key))); c != 0 {
					return c * dir
				}
			}
			return 0
		})
		return docs
	}
	out := make([]bson.D, len(docs))
	for i, d := range docs {
		out[i] = docStage(d, s, now)
	}
	return out
}

// sortKey: a sort sees a missing field as null; arrays sort by an element,
// which the library never asks of it.
func sortKey(v any) any {
	switch v.(type) {
	case missingT:
		return nil
	case bson.A:
		panic(notModelled("$sort on an array"))
	}
	return v
}

// docStage applies a stage that maps each document to one: those of an
// update's pipeline, and $project.
func docStage(d bson.D, s bson.E, now bson.DateTime) bson.D {
	switch s.Key {
	case "$set", "$addFields":
		return setFields(d, asDoc(s.Value, s.Key), &evalCtx{now: now, root: d})
	case "$replaceWith", "$replaceRoot":
		expr := s.Value
		if s.Key == "$replaceRoot" {
			expr = get(asDoc(s.Value, s.Key), "newRoot")
		}
		out, ok := eval(expr, &evalCtx{now: now, root: d}).(bson.D)
		if !ok {
			panic(failure{s.Key + " must evaluate to an object"})
		}
		return out
	case "$project":
		return project(d, asDoc(s.Value, "$project"), now)
	}
	panic(notModelled("stage %s", s.Key))
}

// setFields is $set: every expression is evaluated on the document as the
// stage found it; an existing field keeps its place, a new one is appended,
// and a missing value ($$REMOVE) removes the field. An object of fields
// set on an embedded document adds to it.
func setFields(d bson.D, spec bson.D, c *evalCtx) bson.D {
	out := slices.Clone(d)
	for _, e := range spec {
		if strings.Contains(e.Key, ".") || strings.HasPrefix(e.Key, "$") {
			panic(notModelled("$set of path %q", e.Key))
		}
		var v any
		old := get(out, e.Key)
		if sub, ok := e.Value.(bson.D); ok && !isOperator(sub) && len(sub) > 0 {
			if oldDoc, ok := old.(bson.D); ok {
				v = setFields(oldDoc, sub, c)
			} else if _, ok := old.(bson.A); ok {
				panic(notModelled("$set of an object on an array field %q", e.Key))
			}
		}
		if v == nil {
			v = eval(e.Value, c)
		}
		out = put(out, e.Key, v)
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

// apply returns d after update: a pipeline, or an update document.
func apply(d bson.D, update any, now bson.DateTime) bson.D {
	var out bson.D
	switch u := norm(update).(type) {
	case bson.A:
		out = slices.Clone(d)
		for _, s := range u {
			st := stageOf(s)
			switch st.Key {
			case "$set", "$addFields", "$replaceWith", "$replaceRoot", "$project":
			default:
				panic(notModelled("update stage %s", st.Key))
			}
			out = docStage(out, st, now)
		}
	case bson.D:
		out = applyOperators(d, u, now)
	default:
		panic(notModelled("update of type %T", update))
	}
	if id := get(d, "_id"); id != missing && (get(out, "_id") == missing || compare(get(out, "_id"), id) != 0) {
		panic(failure{"an update may not change _id"})
	}
	return out
}

// applyOperators applies an update document. The server applies the
// fields in lexicographic order of their names (MongoDB 5.0 on): that is
// the order in which new fields are appended.
func applyOperators(d bson.D, u bson.D, now bson.DateTime) bson.D {
	type change struct {
		op, field string
		arg       any
	}
	var changes []change
	for _, o := range u {
		for _, f := range asDoc(o.Value, o.Key) {
			if strings.Contains(f.Key, ".") {
				panic(notModelled("%s of path %q", o.Key, f.Key))
			}
			changes = append(changes, change{o.Key, f.Key, f.Value})
		}
	}
	slices.SortFunc(changes, func(a, b change) int { return strings.Compare(a.field, b.field) })
	out := slices.Clone(d)
	for i, ch := range changes {
		if i > 0 && changes[i-1].field == ch.field {
			panic(failure{"conflicting updates of " + ch.field})
		}
		if ch.field == "_id" {
			panic(failure{"an update may not change _id"})
		}
		switch ch.op {
		case "$set":
			out = put(out, ch.field, ch.arg)
		case "$unset":
			out = put(out, ch.field, missing)
		case "$currentDate":
			if ch.arg != true {
				panic(notModelled("$currentDate %v", ch.arg))
			}
			out = put(out, ch.field, now)
		case "$pull":
			switch arr := get(out, ch.field).(type) {
			case missingT:
			case bson.A:
				kept := bson.A{}
				for _, el := range arr {
					if !pulls(el, ch.arg, now) {
						kept = append(kept, el)
					}
				}
				out = put(out, ch.field, kept)
			default:
				panic(failure{"cannot $pull from a non-array"})
			}
		default:
			panic(notModelled("update operator %s", ch.op))
		}
	}
	return out
}

// pulls reports whether $pull's condition cond removes element el: a query
// on a document element, else equality.
func pulls(el, cond any, now bson.DateTime) bool {
	if q, ok := cond.(bson.D); ok && !isOperator(q) {
		d, ok := el.(bson.D)
		return ok && matches(d, q, now)
	} else if ok {
		panic(notModelled("$pull condition %v", cond))
	}
	return equal(el, cond)
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
	for _, e := range d {
		if e.Key == k {
			return e.Value
		}
	}
	return missing
}
