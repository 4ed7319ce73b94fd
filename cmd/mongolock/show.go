package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mongolock/mongolock"
)

const listHelp = `
Lists everything whose name begins with PREFIX (all without one), in byte order of
name, one row each: locks, elections, semaphores and reader-writer locks (KIND). A
semaphore or reader-writer lock lives apart from the lock of the same name: both are
listed, the lock first. Each row shows whether it is held and by whom (a mongolock's
--owner, by default host/pid; DistributedLock.MongoDB for a .NET holder; the owners of
a semaphore's or reader-writer lock's holders, comma-separated), its last fencing
token, when it was last acquired and when its lease ends (of a semaphore or
reader-writer lock: the newest holder's, and the last lease's end), whether a waiting
process claims the next turn (writer: a writer's claim, which keeps new readers out),
and an election's value. A semaphore's HELD is units held/slots (a holder of
several units counts each), a reader-writer lock's the number of readers or writer. Held is judged by the server's clock.

A name that could be misread (empty, with spaces or characters that do not print, not
UTF-8, beginning with " or -) is printed quoted, as Go quotes a string; every command
reads a name argument that begins with " as such a quoted string, so the printed form,
given as one argument ('"a\nb"' in a shell), names the lock.

--json prints one object per line, with the times in RFC 3339:
  {"kind":"lock","name":"nightly","held":true,"heldBy":"mongolock","owner":"web-1/4242",
   "holders":[{"id":"...","owner":"web-1/4242","fencingToken":1757930000000000001,
   "acquiredAt":"...","expiresAt":"..."}],"fencingToken":1757930000000000001,
   "acquiredAt":"...","expiresAt":"...","waiting":false,"serverTime":"..."}
name is exact; one that is not UTF-8 is quoted, with "nameQuoted":true.
kind is lock, election, semaphore or rwlock. heldBy ("mongolock" or
"DistributedLock.MongoDB") is a lock's or an election's, absent when it is free; value
an election's; n a semaphore's slots and a holder's units its own; a holder's mode
("read" or "write") and writerWaiting a reader-writer lock's. claim, present while waiting is true, is the
waiting process's place: {"process":"...","since":1757930000000000001,"until":"..."},
its id, the fencing token it saw as it began to wait (the same while one wait goes
on), and until when the claim counts unless renewed; next, of a lock or an election,
the place of the process that waits after it.

--watch prints the list, then a row for each change as it is seen, looking every
--interval (1s): a lock that appears, changes holder, token, value or whether it is
held or waited for, or goes, as kubectl get --watch does. The table has an EVENT
column first (ADDED, MODIFIED, DELETED), and --json's objects an "event" (added,
modified, deleted). A lease's end moving at each extension is no change. It runs until
SIGINT or SIGTERM, and exits with 130 or 143 (128+N) then, or with 69 when the server
does not answer a look within --timeout.

Examples:
  mongolock list
  mongolock list --watch
  mongolock list billing/
  mongolock list --json | jq -r 'select(.held) | .name'
  mongolock list --json | jq -r 'select(.kind == "semaphore") | "\(.name) \(.holders | length)/\(.n)"'
`

const inspectHelp = `
Shows everything called NAME, as list does, one row per live holder: the lock or
election NAME, and the semaphore or reader-writer lock NAME (they live apart from the
lock of the same name). A semaphore's HELD is units held/slots, with the holder's
units after it if more than one ("4/4 (3 units)"), a reader-writer lock's each
holder's mode. ID is the holder's acquisition, which release --force --holder
takes. Exits with 1 if nothing is called NAME.

--json prints list's objects, one per line.

Examples:
  mongolock inspect nightly
  mongolock inspect --json exports
`

func (c *cli) listCommand() *command {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	watch := fs.Bool("watch", false, "after the list, print each change as it is seen, until SIGINT or SIGTERM")
	interval := fs.Duration("interval", time.Second, "with --watch, look for changes every `DURATION` (100ms to 1h)")
	cmd := &command{name: "list", synopsis: "list [flags] [PREFIX]", help: listHelp, flags: fs}
	cmd.run = func(args []string) error {
		pos, rest, err := c.parseArgs(cmd, args, 1)
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			return fail(exitUsage, "list: one prefix at most, not %q too", rest[0])
		}
		prefix, err := readName("list", strings.Join(pos, ""))
		if err != nil {
			return err
		}
		s, err := c.conn.open()
		if err != nil {
			return err
		}
		defer s.close()
		if *watch {
			return c.watchList(s, prefix, *asJSON, *interval)
		}
		out := newPrinter(c.stdout, *asJSON, false)
		ctx, cancel := s.ctx()
		defer cancel()
		for info, err := range s.p.Locks(ctx, prefix) {
			if err != nil {
				out.flush()
				return serverError(err)
			}
			out.info(info)
		}
		return out.flush()
	}
	return cmd
}

func (c *cli) inspectCommand() *command {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	cmd := &command{name: "inspect", synopsis: "inspect [flags] NAME", help: inspectHelp, flags: fs}
	cmd.run = func(args []string) error {
		name, err := c.nameArg(cmd, args)
		if err != nil {
			return err
		}
		s, err := c.conn.open()
		if err != nil {
			return err
		}
		defer s.close()
		ctx, cancel := s.ctx()
		defer cancel()
		infos, err := named(ctx, s.p, name)
		switch {
		case err != nil:
			return serverError(err)
		case len(infos) == 0:
			return fail(exitFailed, "inspect: no lock, election, semaphore or reader-writer lock called %q in %s.%s", name, s.db, c.conn.collection)
		}
		out := newPrinter(c.stdout, *asJSON, true)
		for _, info := range infos {
			out.info(info)
		}
		return out.flush()
	}
	return cmd
}

// named returns what is called name: a lock or an election, and a
// semaphore or a reader-writer lock, the lock first. A listing from name
// on has them first, and is cut at the next name.
func named(ctx context.Context, p *mongolock.Provider, name string) ([]mongolock.LockInfo, error) {
	var infos []mongolock.LockInfo
	for info, err := range p.Locks(ctx, name) {
		if err != nil {
			return nil, err
		}
		if info.Name != name {
			break
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// A printer prints documents as an aligned table, one row each (or, with
// holders, one per holder and an ID column), or as JSON lines.
type printer struct {
	json, holders bool
	enc           *json.Encoder
	tw            *tabwriter.Writer
}

func newPrinter(w io.Writer, asJSON, holders bool) *printer {
	p := &printer{json: asJSON, holders: holders, enc: json.NewEncoder(w)}
	p.enc.SetEscapeHTML(false)
	if !asJSON {
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(p.tw, strings.Join(header(holders), "\t"))
	}
	return p
}

// header is the table's first row; with holders, an ID column.
func header(holders bool) []string {
	h := []string{"NAME", "KIND", "HELD", "OWNER", "TOKEN", "ACQUIRED", "EXPIRES", "WAITING", "VALUE"}
	if holders {
		h = append(h, "ID")
	}
	return h
}

func (p *printer) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}

// The JSON form: times in RFC 3339, absent when unknown.
type (
	infoJSON struct {
		Kind          mongolock.Kind `json:"kind"`
		Name          string         `json:"name"`
		NameQuoted    bool           `json:"nameQuoted,omitempty"`
		Held          bool           `json:"held"`
		HeldBy        string         `json:"heldBy,omitempty"`
		Owner         string         `json:"owner"`
		Value         string         `json:"value,omitempty"`
		N             int            `json:"n,omitempty"`
		Holders       []holderJSON   `json:"holders"`
		FencingToken  int64          `json:"fencingToken"`
		AcquiredAt    time.Time      `json:"acquiredAt,omitzero"`
		ExpiresAt     time.Time      `json:"expiresAt,omitzero"`
		Waiting       bool           `json:"waiting"`
		WriterWaiting *bool          `json:"writerWaiting,omitempty"`
		Claim         *claimJSON     `json:"claim,omitempty"`
		Next          *claimJSON     `json:"next,omitempty"`
		ServerTime    time.Time      `json:"serverTime"`
	}
	claimJSON struct {
		Process string    `json:"process"`
		Since   int64     `json:"since"`
		Until   time.Time `json:"until"`
	}
	holderJSON struct {
		ID           string    `json:"id,omitempty"`
		Owner        string    `json:"owner"`
		Mode         string    `json:"mode,omitempty"`
		Units        int       `json:"units,omitempty"`
		FencingToken int64     `json:"fencingToken"`
		AcquiredAt   time.Time `json:"acquiredAt"`
		ExpiresAt    time.Time `json:"expiresAt,omitzero"`
	}
)

// claimOf is c in JSON; nil if c is.
func claimOf(c *mongolock.ClaimInfo) *claimJSON {
	if c == nil {
		return nil
	}
	return &claimJSON{Process: c.Process, Since: c.Since, Until: c.Until}
}

// isLock reports whether info is a lock's or an election's: one holder,
// which may be DistributedLock.MongoDB's.
func isLock(info mongolock.LockInfo) bool {
	return info.Kind == mongolock.KindLock || info.Kind == mongolock.KindElection
}

// heldBy names the library of a lock's holder: mongolock's acquisitions
// always have an owner.
func heldBy(info mongolock.LockInfo) string {
	switch {
	case !info.Held || !isLock(info):
		return ""
	case info.Owner == "":
		return "DistributedLock.MongoDB"
	}
	return "mongolock"
}

func (p *printer) info(info mongolock.LockInfo) {
	if p.json {
		_ = p.enc.Encode(infoJSONOf(info))
		return
	}
	for _, row := range rowsOf(info, p.holders) {
		fmt.Fprintln(p.tw, strings.Join(row, "\t"))
	}
}

// infoJSONOf is info's JSON form.
func infoJSONOf(info mongolock.LockInfo) infoJSON {
	j := infoJSON{Kind: info.Kind, Name: info.Name, NameQuoted: !utf8.ValidString(info.Name), Held: info.Held, HeldBy: heldBy(info), Owner: info.Owner,
		Value: info.Value, N: info.N, Holders: []holderJSON{}, FencingToken: info.FencingToken,
		AcquiredAt: known(info.AcquiredAt), ExpiresAt: known(info.ExpiresAt), Waiting: info.Waiting, ServerTime: info.ServerTime}
	for _, h := range info.Holders {
		hj := holderJSON{ID: h.ID, Owner: h.Owner, FencingToken: h.FencingToken, AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt}
		if info.Kind == mongolock.KindRWLock {
			hj.Mode = mode(h)
		} else if info.Kind == mongolock.KindSemaphore {
			hj.Units = h.Units
		}
		j.Holders = append(j.Holders, hj)
	}
	if j.NameQuoted { // JSON's strings are UTF-8: the quoted form is exact
		j.Name = printName(info.Name)
	}
	if info.Kind == mongolock.KindRWLock {
		j.WriterWaiting = &info.WriterWaiting
	}
	j.Claim, j.Next = claimOf(info.Claim), claimOf(info.NextClaim)
	return j
}

// rowsOf is info's rows of a table: one, or with holders one per holder
// of a semaphore or a reader-writer lock, with an ID column.
func rowsOf(info mongolock.LockInfo, holders bool) [][]string {
	waiting := yesNo(info.Waiting)
	if info.WriterWaiting {
		waiting = "writer"
	}
	value := cell(info.Value, 40)
	row := func(held, owner, tok string, acquired, expires time.Time, id string) []string {
		cells := []string{printName(info.Name), string(info.Kind), held, owner, tok, ago(acquired, info.ServerTime),
			ago(expires, info.ServerTime), waiting, value}
		if holders {
			cells = append(cells, id)
		}
		return cells
	}
	if !holders || len(info.Holders) == 0 || isLock(info) {
		id := "-"
		if len(info.Holders) > 0 {
			id = info.Holders[0].ID
		}
		return [][]string{row(held(info, nil), owners(info), token(info.FencingToken), info.AcquiredAt, info.ExpiresAt, id)}
	}
	var rows [][]string
	for _, h := range info.Holders {
		rows = append(rows, row(held(info, &h), cell(h.Owner, 40), token(h.FencingToken), h.AcquiredAt, h.ExpiresAt, h.ID))
	}
	return rows
}

// held is the HELD cell of info, or of its holder h: yes or no; a
// semaphore's units held/slots, and h's units if more than one; a
// reader-writer lock's readers or writer, or h's mode.
func held(info mongolock.LockInfo, h *mongolock.HolderInfo) string {
	switch {
	case info.Kind == mongolock.KindSemaphore && h != nil && h.Units > 1:
		return fmt.Sprintf("%s (%d units)", held(info, nil), h.Units)
	case info.Kind == mongolock.KindSemaphore:
		units := 0
		for _, h := range info.Holders {
			units += h.Units
		}
		return fmt.Sprintf("%d/%d", units, info.N)
	case info.Kind != mongolock.KindRWLock || len(info.Holders) == 0:
		return yesNo(info.Held)
	case h != nil:
		return mode(*h)
	case info.Holders[0].Write:
		return "writer"
	case len(info.Holders) == 1:
		return "1 reader"
	}
	return fmt.Sprintf("%d readers", len(info.Holders))
}

// owners is the OWNER cell of info: a lock's holder, or the owners of a
// semaphore's or a reader-writer lock's holders.
func owners(info mongolock.LockInfo) string {
	switch {
	case !info.Held:
		return "-"
	case isLock(info) && info.Owner == "":
		return "(" + heldBy(info) + ")"
	case isLock(info):
		return cell(info.Owner, 40)
	}
	var names []string
	for _, h := range info.Holders {
		names = append(names, h.Owner)
	}
	return cell(strings.Join(names, ","), 40)
}

func mode(h mongolock.HolderInfo) string {
	switch {
	case h.Write:
		return "write"
	case h.Upgradeable:
		return "upgradeable"
	}
	return "read"
}

// known is t, or the zero time for a time never set: absent, or the epoch
// a lock's document is created with.
func known(t time.Time) time.Time {
	if t.Unix() <= 0 {
		return time.Time{}
	}
	return t
}

// ago says when t is from now, in a few digits: "in 29.5s", "3m12s ago".
func ago(t, now time.Time) string {
	if known(t).IsZero() {
		return "-"
	}
	d := t.Sub(now)
	abs := d.Abs()
	switch {
	case abs < time.Minute:
		abs = abs.Round(100 * time.Millisecond)
	case abs < time.Hour:
		abs = abs.Round(time.Second)
	default:
		abs = abs.Round(time.Minute)
	}
	if d >= 0 {
		return "in " + abs.String()
	}
	return abs.String() + " ago"
}

func token(t int64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatInt(t, 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// cell makes s fit a table cell: "-" if empty, quoted if it has spaces or
// characters that are not printable, cut to max runes.
func cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) {
		s = strconv.Quote(s)
	}
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max-1]) + "…"
	}
	return s
}
