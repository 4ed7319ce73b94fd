// Package memdb is an in-memory model of a MongoDB collection as mongolock
// uses one: documents keyed by _id; the operations, query and update
// operators, pipeline stages and expressions of the library's statements,
// evaluated as MongoDB documents them; the change events of each write, as
// MongoDB 8.0 or 4.4 reports them (Events); and, in a Store, the faults of
// a network. $$NOW is an argument of every operation: the store's clock.
//
// It models that subset and nothing more: anything else is answered with
// an error that names what is not modelled, never with a guess. A
// differential test in the root package holds it to the test server,
// statement by statement. Not modelled: indexes but _id's, the server's
// checks of invalid statements (but for $map's and $filter's arguments),
// and the driver.
package memdb

import (
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

// refusal is panicked with where the server refuses a statement: its
// error's code and message.
type refusal struct {
	code int32
	msg  string
}

// guard recovers the model's panics into err: an error wrapping
// ErrNotModelled, or a refusal as a command's error.
func guard(err *error) { recovered(recover(), err, false) }

// guardWrite is guard of a write command (update), whose refusal is a
// write error.
func guardWrite(err *error) { recovered(recover(), err, true) }

func recovered(r any, err *error, write bool) {
	switch r := r.(type) {
	case nil:
	case unmodelled:
		*err = fmt.Errorf("%w: %s", ErrNotModelled, r.what)
	case refusal:
		if write {
			*err = mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: int(r.code), Message: r.msg}}}
		} else {
			*err = mongo.CommandError{Code: r.code, Name: fmt.Sprintf("Location%d", r.code), Message: r.msg}
		}
	default:
		panic(r)
	}
}

// Table is one collection's documents, in insertion order (the order
// a find without a sort returns them); its change events go to its
// database's history, which its change streams read. It is not safe for
// concurrent use: a Store is.
type Table struct {
	DB, Name string // the namespace its change events name
	Events   Events // the form of its updates' change events
	docs     []bson.D
	hist     *history  // where its change events go; nil: one of its own, made on first use
	seq      uint32    // events so far
	rec      *[]Change // where Record keeps the changes, while it runs
}

// Change is a document a write changed: its _id, and the document before
// and after the write (nil: absent).
type Change struct {
	ID            bson.RawValue
	Before, After bson.Raw
}

// Record runs op, which operates on c, and returns the changes op made to
// c's documents, in the order it made them (a document changed twice
// twice), with op's error. It costs what the changes cost to encode,
// whatever the collection's size.
func (c *Table) Record(op func() error) (changes []Change, err error) {
	c.rec = &changes
	defer func() { c.rec = nil }()
	err = op()
	return changes, err
}

// record keeps the change of a document from before to after (nil:
// absent) for Record, if it runs.
func (c *Table) record(before, after bson.D) {
	if c.rec == nil {
		return
	}
	var ch Change
	if before != nil {
		ch.Before = encode(before)
		ch.ID = ch.Before.Lookup("_id")
	}
	if after != nil {
		ch.After = encode(after)
		ch.ID = ch.After.Lookup("_id")
	}
	*c.rec = append(*c.rec, ch)
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
		if v != nil {
			return normEach(v)
		}
	case bson.Raw:
		if d, ok := rawDoc(v); ok {
			return d
		}
	case mongo.Pipeline:
		if v != nil {
			return normEach(v)
		}
	}
	return encoded(v)
}

// normEach is the array of norm of each element of v.
func normEach[S ~[]E, E any](v S) bson.A {
	out := make(bson.A, len(v))
	for i, e := range v {
		out[i] = norm(e)
	}
	return out
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
	var d bson.D
	err := bson.Unmarshal(encode(bson.D{{Key: "v", Value: v}}), &d)
	if err != nil {
		panic(notModelled("value %T: %v", v, err))
	}
	return d[0].Value
}

func encode(d bson.D) bson.Raw {
	raw, err := bson.Marshal(d)
	if err != nil {
		panic(notModelled("value: %v", err))
	}
	return raw
}

func encodeAll(docs []bson.D) []bson.Raw {
	out := make([]bson.Raw, len(docs))
	for i, d := range docs {
		out[i] = encode(d)
	}
	return out
}

// same reports whether a and b are the same BSON, byte by byte: of the
// same types (1 is not 1.0) and, in documents, the same field order.
func same(a, b any) bool {
	switch x := a.(type) {
	case bson.D:
		y, ok := b.(bson.D)
		return ok && slices.EqualFunc(x, y, func(e, f bson.E) bool { return e.Key == f.Key && same(e.Value, f.Value) })
	case bson.A:
		y, ok := b.(bson.A)
		return ok && slices.EqualFunc(x, y, same)
	case float64: // -0 is not 0 byte by byte
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return bsonType(a) == bsonType(b) && a == b // the model's other types are comparable
}

// matching are the indexes of the documents filter matches, the first
// most of them (-1: all).
func (c *Table) matching(filter any, most int) []int {
	f := as[bson.D](norm(filter), "filter")
	var out []int
	for i, d := range c.docs {
		if len(out) != most && matches(d, f) {
			out = append(out, i)
		}
	}
	return out
}

// Docs returns the documents, in insertion order.
func (c *Table) Docs() []bson.Raw { return encodeAll(c.docs) }

// InsertOne inserts doc, which has an _id; a document with the same _id
// gives a duplicate key error, as mongo.IsDuplicateKeyError recognises it.
func (c *Table) InsertOne(now time.Time, doc any) (err error) {
	defer guard(&err)
	d := as[bson.D](norm(doc), "document")
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
	c.record(nil, d)
	c.emit(now, "insert", d, nil)
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
func (c *Table) FindOneAndUpdate(now time.Time, filter, update any, o FindOneAndUpdateOptions) (doc bson.Raw, err error) {
	defer guard(&err)
	u := parseUpdate(update)
	var projection bson.E
	if o.Projection != nil {
		projection = bson.E{Key: "$project", Value: norm(o.Projection)}
		parseStage(projection)
	}
	hits := c.matching(filter, 1)
	if len(hits) == 0 {
		return nil, mongo.ErrNoDocuments
	}
	out := c.docs[hits[0]]
	c.update(now, hits[0], u)
	if o.After {
		out = c.docs[hits[0]]
	}
	if o.Projection != nil {
		out = stage([]bson.D{out}, projection, now)[0]
	}
	return encode(out), nil
}

// UpdateOne updates the first document filter matches: it reports how
// many matched and how many changed (0 when the update left it as it was).
func (c *Table) UpdateOne(now time.Time, filter, update any) (matched, modified int, err error) {
	return c.updateAll(now, filter, update, 1)
}

// UpdateMany updates every document filter matches.
func (c *Table) UpdateMany(now time.Time, filter, update any) (matched, modified int, err error) {
	return c.updateAll(now, filter, update, -1)
}

func (c *Table) updateAll(now time.Time, filter, update any, most int) (matched, modified int, err error) {
	defer guardWrite(&err)
	u := parseUpdate(update)
	hits := c.matching(filter, most)
	for _, i := range hits {
		if c.update(now, i, u) {
			modified++
		}
	}
	return len(hits), modified, nil
}

// parseUpdate is update as the model applies it (norm), refused as the
// server refuses it before it reads a document: a pipeline of the stages
// an update takes and of expressions it parses.
func parseUpdate(update any) any {
	switch u := norm(update).(type) {
	case bson.A:
		for _, s := range u {
			st := stageOf(s)
			if st.Key == "$match" || st.Key == "$sort" {
				panic(notModelled("update stage %s", st.Key))
			}
			parseStage(st)
		}
		return u
	case bson.D:
		return u
	}
	panic(notModelled("update of type %T", update))
}

// update applies update (parseUpdate's) to document i, and reports
// whether it changed it: a pipeline, if the document is another; an
// update document, if it wrote a field (a $currentDate field always,
// changed or not, as the server does). A change is an event, in the
// table's form of events.
func (c *Table) update(now time.Time, i int, update any) bool {
	before, after := c.docs[i], c.docs[i]
	var written []string
	switch u := update.(type) {
	case bson.A:
		for _, s := range u {
			after = stage([]bson.D{after}, stageOf(s), now)[0]
		}
	case bson.D:
		after, written = applyOperators(before, u, bson.NewDateTimeFromTime(now))
	}
	if !equal(get(after, "_id"), get(before, "_id")) {
		panic(notModelled("an update that changes _id"))
	}
	var op string
	var desc bson.D
	switch _, pipeline := update.(bson.A); {
	case pipeline && same(before, after), !pipeline && len(written) == 0:
		return false
	case pipeline:
		op, desc = c.Events.pipelineEvent(before, after)
	default:
		op, desc = c.Events.operatorsEvent(before, after, written)
	}
	c.docs[i] = after
	c.record(before, after)
	c.emit(now, op, after, desc)
	return true
}

// DeleteOne deletes the first document filter matches, and reports
// whether there was one.
func (c *Table) DeleteOne(now time.Time, filter any) (deleted bool, err error) {
	defer guard(&err)
	hits := c.matching(filter, 1)
	for _, i := range hits {
		c.record(c.docs[i], nil)
		c.emit(now, "delete", c.docs[i], nil)
		c.docs = slices.Delete(c.docs, i, i+1)
	}
	return len(hits) > 0, nil
}

// Put makes doc the document of _id id (nil: none), in place of the one
// there was, as a secondary applies an oplog entry: with the change event
// of an insert, a replace or a delete, and without evaluating a statement.
func (c *Table) Put(now time.Time, id bson.RawValue, doc bson.Raw) (err error) {
	defer guard(&err)
	key, ok := rawValue(id)
	if !ok {
		panic(notModelled("_id %v", id))
	}
	i := slices.IndexFunc(c.docs, func(x bson.D) bool { return sameID(get(x, "_id"), key) })
	switch {
	case doc == nil && i >= 0:
		c.record(c.docs[i], nil)
		c.emit(now, "delete", c.docs[i], nil)
		c.docs = slices.Delete(c.docs, i, i+1)
	case doc == nil:
	case i < 0:
		d := as[bson.D](norm(doc), "document")
		c.docs = append(c.docs, d)
		c.record(nil, d)
		c.emit(now, "insert", d, nil)
	default:
		d := as[bson.D](norm(doc), "document")
		before := c.docs[i]
		c.docs[i] = d
		c.record(before, d)
		c.emit(now, "replace", d, nil)
	}
	return nil
}

// sameID is equal for two _ids, at a string's cost for strings.
func sameID(a, b any) bool {
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		return ok && x == y
	}
	return equal(a, b)
}

// Find returns the documents filter matches, in insertion order, with
// projection applied (nil: whole).
func (c *Table) Find(now time.Time, filter, projection any) (docs []bson.Raw, err error) {
	pipeline := bson.A{bson.D{{Key: "$match", Value: filter}}}
	if projection != nil {
		pipeline = append(pipeline, bson.D{{Key: "$project", Value: projection}})
	}
	return c.Aggregate(now, pipeline)
}

// Aggregate runs pipeline over the collection's documents.
func (c *Table) Aggregate(now time.Time, pipeline any) (docs []bson.Raw, err error) {
	defer guard(&err)
	stages := as[bson.A](norm(pipeline), "pipeline")
	for _, s := range stages {
		parseStage(stageOf(s))
	}
	cur := slices.Clone(c.docs)
	for _, s := range stages {
		cur = stage(cur, stageOf(s), now)
	}
	return encodeAll(cur), nil
}

func stageOf(s any) bson.E {
	d, ok := s.(bson.D)
	if !ok || len(d) != 1 {
		panic(notModelled("pipeline stage %v", s))
	}
	return d[0]
}

// stage applies a stage of an aggregation or of an update's pipeline.
func stage(docs []bson.D, s bson.E, now time.Time) []bson.D {
	switch s.Key {
	case "$match":
		return slices.DeleteFunc(docs, func(d bson.D) bool { return !matches(d, as[bson.D](s.Value, s.Key)) })
	case "$sort":
		spec := as[bson.D](s.Value, s.Key)
		slices.SortStableFunc(docs, func(a, b bson.D) int {
			for _, k := range spec {
				if dir, _ := integer(k.Value); dir != 1 && dir != -1 || strings.Contains(k.Key, ".") {
					panic(notModelled("$sort by %s: %v", k.Key, k.Value))
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
		c := newVars(bson.NewDateTimeFromTime(now), d)
		switch s.Key {
		case "$set":
			out[i] = setFields(d, as[bson.D](s.Value, s.Key), c)
		case "$replaceWith":
			out[i] = as[bson.D](eval(s.Value, c), s.Key)
		case "$project":
			out[i] = project(d, as[bson.D](s.Value, s.Key), c)
		default:
			panic(notModelled("stage %s", s.Key))
		}
	}
	return out
}

// orNull: a sort sees a missing field as null, an array a missing
// element.
func orNull(v any) any {
	if v == missing {
		return nil
	}
	return v
}

// setFields is $set, and an expression object's fields set on an empty
// document: every expression is evaluated on the document as the stage
// found it; an existing field keeps its place, a new one is appended, and
// a missing value ($$REMOVE) removes the field.
func setFields(d bson.D, spec bson.D, c vars) bson.D {
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
	case i < 0 && v != missing:
		return append(d, bson.E{Key: k, Value: v})
	case i < 0:
		return d
	case v == missing:
		return slices.Delete(d, i, i+1)
	}
	d[i].Value = v
	return d
}

// updateOperators are the operators of an update document: each gives a
// field's new value from its old one and the operator's argument.
var updateOperators = map[string]func(old, arg any, now bson.DateTime) any{
	"$set":   func(_, arg any, _ bson.DateTime) any { return arg },
	"$unset": func(_, _ any, _ bson.DateTime) any { return missing },
	"$currentDate": func(_, arg any, now bson.DateTime) any {
		if arg != true {
			panic(notModelled("$currentDate %v", arg))
		}
		return now
	},
	"$pull": func(old, arg any, _ bson.DateTime) any {
		q := as[bson.D](arg, "$pull")
		if isOperator(q) {
			panic(notModelled("$pull condition %v", q))
		} else if old == missing {
			return missing
		}
		return slices.DeleteFunc(slices.Clone(as[bson.A](old, "$pull from")), func(el any) bool {
			d, ok := el.(bson.D)
			return ok && matches(d, q)
		})
	},
}

// applyOperators applies an update document. The server applies the
// fields in lexicographic order of their names (MongoDB 5.0 on): that is
// the order in which new fields are appended, and in which written lists
// the fields it logs: each one whose value it changed, created or
// removed, and each $currentDate field, changed or not (its operator
// never reports a no-op: current_date_node.cpp).
func applyOperators(d bson.D, u bson.D, now bson.DateTime) (out bson.D, written []string) {
	type change struct {
		field, op string
		arg       any
	}
	var changes []change
	for _, o := range u {
		for _, f := range as[bson.D](o.Value, o.Key) {
			changes = append(changes, change{f.Key, o.Key, f.Value})
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int { return strings.Compare(a.field, b.field) })
	out = slices.Clone(d)
	for i, ch := range changes {
		apply, ok := updateOperators[ch.op]
		if !ok || strings.Contains(ch.field, ".") || ch.field == "_id" || i > 0 && changes[i-1].field == ch.field {
			panic(notModelled("%s of %q", ch.op, ch.field))
		}
		old := get(out, ch.field)
		v := apply(old, ch.arg, now)
		if ch.op == "$currentDate" || !same(old, v) {
			written = append(written, ch.field)
		}
		out = put(out, ch.field, v)
	}
	return out, written
}

func isOperator(d bson.D) bool { return len(d) > 0 && strings.HasPrefix(d[0].Key, "$") }

// get is field k of d, or missing.
func get(d bson.D, k string) any {
	if i := slices.IndexFunc(d, func(e bson.E) bool { return e.Key == k }); i >= 0 {
		return d[i].Value
	}
	return missing
}
