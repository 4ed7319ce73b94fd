package memdb

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Events is the form in which a Table reports its updates' change events:
// as the MongoDB versions it names report them. Inserts, deletes and the
// shape of every event are the same in both.
type Events uint8

const (
	// Events8 is MongoDB 8.0's form (5.0's and later's), the zero value.
	// An update is an update event whose updateDescription is what the
	// server logged: for an update document, each top-level field it
	// wrote, whole; for a pipeline, the diff the server computes of the
	// document before and after (an embedded document's and an array's
	// changes as dotted paths, "holders.2.expiresAt", and an array that
	// shrank in truncatedArrays), or, where the server finds no diff
	// smaller than the document, a replace event with the document after.
	Events8 Events = iota
	// Events44 is MongoDB 4.4's: a pipeline update is always a replace
	// event; an update document's is an update event listing each
	// top-level field it wrote, whole, and those it removed, without
	// truncatedArrays.
	Events44
)

func (e Events) String() string {
	switch e {
	case Events8:
		return "8.0"
	case Events44:
		return "4.4"
	}
	return fmt.Sprintf("Events(%d)", e)
}

// changeEvent is the change event of a write in MongoDB's shape: a resume
// token, the operation, its cluster time (the seq-th event) and wall time,
// the full document (insert, replace), the namespace, the document's key,
// and an update's description of its change (desc).
func (c *Table) changeEvent(now time.Time, seq uint32, op string, doc, desc bson.D) bson.D {
	ev := bson.D{
		{Key: "_id", Value: bson.D{{Key: "_data", Value: fmt.Sprintf("%08X%08X", now.Unix(), seq)}}},
		{Key: "operationType", Value: op},
		{Key: "clusterTime", Value: bson.Timestamp{T: uint32(now.Unix()), I: seq}},
		{Key: "wallTime", Value: bson.NewDateTimeFromTime(now)},
	}
	if op == "insert" || op == "replace" {
		ev = append(ev, bson.E{Key: "fullDocument", Value: doc})
	}
	ev = append(ev, bson.E{Key: "ns", Value: bson.D{{Key: "db", Value: c.DB}, {Key: "coll", Value: c.Name}}},
		bson.E{Key: "documentKey", Value: bson.D{{Key: "_id", Value: get(doc, "_id")}}})
	if op == "update" {
		ev = append(ev, bson.E{Key: "updateDescription", Value: desc})
	}
	return ev
}

// operatorsEvent is the event of an update document's write of before to
// after: an update event listing written, the fields it wrote in the
// order it applied them (applyOperators). In 8.0's form (a delta oplog
// entry, V2LogBuilder) the fields that were there come first, then those
// it created; in 4.4's (a $set and an $unset), in that order alone.
func (e Events) operatorsEvent(before, after bson.D, written []string) (op string, desc bson.D) {
	updated, created, removed := bson.D{}, bson.D{}, bson.A{}
	for _, f := range written {
		switch v := get(after, f); {
		case v == missing:
			removed = append(removed, f)
		case e == Events8 && get(before, f) == missing:
			created = append(created, bson.E{Key: f, Value: v})
		default:
			updated = append(updated, bson.E{Key: f, Value: v})
		}
	}
	return "update", e.description(append(updated, created...), removed, bson.A{})
}

// pipelineEvent is the event of a pipeline's update of before to after:
// on 4.4, a replace; from 5.0, as pipeline_executor.cpp logs it, the
// delta of the diff doc_diff::computeOplogDiff computes (padded by the
// delta oplog entry's metadata), unless none smaller than after was
// found: then a replace.
func (e Events) pipelineEvent(before, after bson.D) (op string, desc bson.D) {
	if e == Events44 {
		return "replace", nil
	}
	d := oplogDiff(before, after, deltaMetadata)
	if d == nil {
		return "replace", nil
	}
	var delta description
	d.describe("", &delta)
	return "update", e.description(delta.updated, delta.removed, delta.truncated)
}

// description is an update event's updateDescription in form e.
func (e Events) description(updated bson.D, removed, truncated bson.A) bson.D {
	desc := bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}}
	if e == Events8 {
		desc = append(desc, bson.E{Key: "truncatedArrays", Value: truncated})
	}
	return desc
}

// The sizes MongoDB's diff counts (document_diff_serialization.h,
// update_oplog_entry_serialization.h): the metadata a delta oplog entry
// adds to a diff, an empty document's diff, an empty array's.
const (
	deltaMetadata = 15
	emptyDocDiff  = 5
	emptyArrDiff  = 9
)

// oplogDiff is doc_diff::computeOplogDiff: the diff of pre to post
// (diffDocs, the size it counts padded), if one was found whose BSON is
// smaller than post; else nil.
func oplogDiff(pre, post bson.D, padding int) *docDiff {
	if d := diffDocs(pre, post, padding); d != nil && valueSize(d.serialize()) < valueSize(post) {
		return d
	}
	return nil
}

// docDiff is the diff of a document (diff_tree::DocumentSubDiffNode):
// the fields updated, inserted (new, or moved after a removed one) and
// deleted (each false, as serialized), each in the order found, and the
// diffs of embedded documents and arrays; size is what MongoDB's
// approximate size tracker counts.
type docDiff struct {
	updates, inserts, deletes bson.D
	subs                      []subDiff
	size                      int
}

// subDiff is the diff of a field's or an element's embedded document or
// array (one of doc, arr), at key (a field name, or an array's index).
type subDiff struct {
	key string
	doc *docDiff
	arr *arrDiff
}

func (s subDiff) size() int {
	if s.doc != nil {
		return s.doc.size
	}
	return s.arr.size
}

// arrDiff is the diff of an array (diff_tree::ArrayNode): its elements
// updated or diffed, in index order, and its new length if it shrank
// (-1: it did not).
type arrDiff struct {
	elems  []arrElem
	resize int
	size   int
}

// arrElem is an array's element at idx: its new value (update), or the
// diff of its document or array (sub).
type arrElem struct {
	idx    int
	update any
	sub    *subDiff
}

// The size tracker: an entry counts its key, a type byte and a null, and
// its value; a document's first update, insert and delete each add their
// section's wrapping, a sub-diff the prefix of its key.
const sectionWrapping = 8

// add adds field k, of value v, to section, one of d's updates, inserts
// and deletes.
func (d *docDiff) add(section *bson.D, k string, v any) {
	if len(*section) == 0 {
		d.size += sectionWrapping
	}
	d.size += len(k) + 2 + valueSize(v)
	*section = append(*section, bson.E{Key: k, Value: v})
}

func (d *docDiff) addSub(s subDiff) {
	d.size += len(s.key) + 2 + s.size() + 1
	d.subs = append(d.subs, s)
}

func (a *arrDiff) add(el arrElem) {
	v := 0
	if el.sub != nil {
		v = el.sub.size()
	} else {
		v = valueSize(el.update)
	}
	a.size += 1 + len(strconv.Itoa(el.idx)) + 2 + v
	a.elems = append(a.elems, el)
}

// diffDocs is document_diff_calculator.cpp's computeDocDiff: the diff of
// pre to post, walking both in order; nil if it grew larger than post
// before the end, or is not smaller than it. A field whose name differs
// from the one at its place in post is deleted, unless post has it later:
// then it is inserted there, whatever its value.
func diffDocs(pre, post bson.D, padding int) *docDiff {
	d := &docDiff{size: padding + emptyDocDiff}
	postSize := valueSize(post)
	deleted := map[string]bool{}
	i, j := 0, 0
	for i < len(pre) && j < len(post) {
		if postSize < d.size {
			return nil
		}
		p, q := pre[i], post[j]
		switch {
		case p.Key == q.Key && same(p.Value, q.Value):
			i, j = i+1, j+1
		case p.Key == q.Key:
			if sub, ok := diffValues(q.Key, p.Value, q.Value); ok {
				d.addSub(sub)
			} else {
				d.add(&d.updates, q.Key, q.Value)
			}
			i, j = i+1, j+1
		default:
			deleted[p.Key] = true
			i++
		}
	}
	for ; i < len(pre); i++ {
		d.add(&d.deletes, pre[i].Key, false)
	}
	for ; j < len(post); j++ {
		d.add(&d.inserts, post[j].Key, post[j].Value)
		delete(deleted, post[j].Key)
	}
	for _, k := range slices.Sorted(maps.Keys(deleted)) { // a std::set's order
		d.add(&d.deletes, k, false)
	}
	if postSize > d.size {
		return d
	}
	return nil
}

// diffArrays is computeArrayDiff: the diff of pre to post, element by
// element; nil if it grew larger than post before the end, or is not
// smaller than it.
func diffArrays(pre, post bson.A) *arrDiff {
	a := &arrDiff{resize: -1, size: emptyArrDiff}
	postSize := valueSize(post)
	n := 0
	for ; n < len(pre) && n < len(post); n++ {
		if postSize < a.size {
			return nil
		}
		if same(pre[n], post[n]) {
			continue
		}
		if sub, ok := diffValues(strconv.Itoa(n), pre[n], post[n]); ok {
			a.add(arrElem{idx: n, sub: &sub})
		} else {
			a.add(arrElem{idx: n, update: post[n]})
		}
	}
	for ; n < len(post); n++ {
		a.add(arrElem{idx: n, update: post[n]})
	}
	if len(pre) > len(post) {
		a.resize = len(post)
		a.size += 1 + 4 + 2 // its "l" field, an int32
	}
	if postSize > a.size {
		return a
	}
	return nil
}

// diffValues is calculateSubDiffHelper's choice: two documents or two
// arrays are diffed, if their diff is smaller than post; else (ok false)
// post is written whole.
func diffValues(key string, pre, post any) (s subDiff, ok bool) {
	switch x := pre.(type) {
	case bson.D:
		if y, isDoc := post.(bson.D); isDoc {
			s.doc = diffDocs(x, y, 0)
		}
	case bson.A:
		if y, isArr := post.(bson.A); isArr {
			s.arr = diffArrays(x, y)
		}
	}
	s.key = key
	return s, s.doc != nil || s.arr != nil
}

// serialize is the diff as the delta oplog entry holds it: sections d
// (deletes), u (updates), i (inserts), then a sub-diff per field, its name
// prefixed with s; an array's is {a: true, l: <new length>, u<index>: …,
// s<index>: …}.
func (d *docDiff) serialize() bson.D {
	out := bson.D{}
	for _, sec := range []bson.E{{Key: "d", Value: d.deletes}, {Key: "u", Value: d.updates}, {Key: "i", Value: d.inserts}} {
		if len(sec.Value.(bson.D)) > 0 {
			out = append(out, sec)
		}
	}
	for _, s := range d.subs {
		out = append(out, bson.E{Key: "s" + s.key, Value: s.serialize()})
	}
	return out
}

func (s subDiff) serialize() bson.D {
	if s.doc != nil {
		return s.doc.serialize()
	}
	out := bson.D{{Key: "a", Value: true}}
	if s.arr.resize >= 0 {
		out = append(out, bson.E{Key: "l", Value: int32(s.arr.resize)})
	}
	for _, el := range s.arr.elems {
		if el.sub != nil {
			out = append(out, bson.E{Key: "s" + strconv.Itoa(el.idx), Value: el.sub.serialize()})
		} else {
			out = append(out, bson.E{Key: "u" + strconv.Itoa(el.idx), Value: el.update})
		}
	}
	return out
}

// description is an update event's description of a delta, as
// change_stream_document_diff_parser.cpp reads one.
type description struct {
	updated            bson.D
	removed, truncated bson.A
}

// describe adds d, the diff of the document at path, to desc: per
// document, its updated fields, its inserted ones, its deleted ones, then
// its sub-diffs'; per array, its new length, then its elements in index
// order.
func (d *docDiff) describe(path string, desc *description) {
	if desc.updated == nil {
		desc.updated, desc.removed, desc.truncated = bson.D{}, bson.A{}, bson.A{}
	}
	for _, e := range append(d.updates[:len(d.updates):len(d.updates)], d.inserts...) {
		desc.updated = append(desc.updated, bson.E{Key: dotted(path, e.Key), Value: e.Value})
	}
	for _, k := range d.deletes {
		desc.removed = append(desc.removed, dotted(path, k.Key))
	}
	for _, s := range d.subs {
		s.describe(dotted(path, s.key), desc)
	}
}

func (s subDiff) describe(path string, desc *description) {
	if s.doc != nil {
		s.doc.describe(path, desc)
		return
	}
	if s.arr.resize >= 0 {
		desc.truncated = append(desc.truncated, bson.D{{Key: "field", Value: path}, {Key: "newSize", Value: int32(s.arr.resize)}})
	}
	for _, el := range s.arr.elems {
		if el.sub != nil {
			el.sub.describe(dotted(path, el.sub.key), desc)
		} else {
			desc.updated = append(desc.updated, bson.E{Key: dotted(path, strconv.Itoa(el.idx)), Value: el.update})
		}
	}
}

func dotted(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// valueSize is the size of v's BSON value, without its type byte and key
// (BSONElement::valuesize); a document's or an array's is its objsize.
func valueSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 0
	case bool:
		return 1
	case int32:
		return 4
	case int64, float64, bson.DateTime:
		return 8
	case string:
		return 4 + len(x) + 1
	case bson.D:
		n := 4 + 1
		for _, e := range x {
			n += 1 + len(e.Key) + 1 + valueSize(e.Value)
		}
		return n
	case bson.A:
		n := 4 + 1
		for i, e := range x {
			n += 1 + len(strconv.Itoa(i)) + 1 + valueSize(e)
		}
		return n
	}
	panic(notModelled("the size of a %T", v))
}
