package replset

// oplog is a member's oplog, capped: its entries from index start on. The
// entries before start were dropped once every member had applied them
// and a majority had: no rollback can need them.
type oplog struct {
	start   int
	entries []entry
}

// dropAtLeast is the fewest entries dropped at a time, so that dropping
// copies each entry kept a bounded number of times.
const dropAtLeast = 64

// len returns the index of the next entry: the number written, dropped
// ones included.
func (o *oplog) len() int { return o.start + len(o.entries) }

// at returns the entry of index i, which is not dropped.
func (o *oplog) at(i int) *entry { return &o.entries[i-o.start] }

// matches reports whether the entry of index i is e's, or was dropped (a
// dropped entry is every member's).
func (o *oplog) matches(i int, e *entry) bool {
	return i < o.start || i < o.len() && o.at(i).optime == e.optime
}

func (o *oplog) add(e entry) { o.entries = append(o.entries, e) }

func (o *oplog) last() *entry { return o.at(o.len() - 1) }

// truncate keeps the entries before index n.
func (o *oplog) truncate(n int) { o.entries = o.entries[:n-o.start] }

// drop forgets the entries before index n, keeping the last; it does so
// once at least dropAtLeast of them, and half the entries, can go.
func (o *oplog) drop(n int) {
	k := min(n, o.len()-1) - o.start
	if k < dropAtLeast || 2*k < len(o.entries) {
		return
	}
	o.entries = append([]entry(nil), o.entries[k:]...)
	o.start += k
}
