package main

import (
	"encoding/json"
	"errors"
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
Lists the locks whose names begin with PREFIX (all without one), in byte order of
name: whether each is held, by whom (a mongolock's --owner, by default host/pid;
DistributedLock.MongoDB for a .NET holder), its fencing token, when it was acquired
and when its lease ends, whether a waiting process claims the next turn, and its
value (an election's). Held is judged by the server's clock. Semaphores and
reader-writer locks are not listed: inspect shows them by name.

--json prints one object per line, with the times in RFC 3339:
  {"kind":"lock","name":"nightly","held":true,"heldBy":"mongolock","owner":"web-1/4242",
   "fencingToken":1757930000000000001,"acquiredAt":"...","expiresAt":"...",
   "waiting":false,"serverTime":"..."}
heldBy is "mongolock" or "DistributedLock.MongoDB", and absent when the lock is free.

Examples:
  mongolock list
  mongolock list billing/
  mongolock list --json | jq -r 'select(.held) | .name'
`

const inspectHelp = `
Shows the lock NAME, as list does, and the semaphore or reader-writer lock NAME if
there is one (they are separate from the lock of the same name): one row per live
holder, with its owner, fencing token, and when it acquired and its lease ends. A
semaphore's HELD is holders/slots; a reader-writer lock's is each holder's mode,
and WAITING says whether a writer waits. Exits with 1 if none of them exists.

--json prints one object per line: the lock's as list prints it, then
  {"kind":"semaphore","name":"exports","n":3,"holders":[{"owner":"...",
   "fencingToken":...,"acquiredAt":"...","expiresAt":"..."}],"fencingToken":...,
   "serverTime":"..."}
or {"kind":"rwlock",...,"holders":[{"mode":"read",...}],"writerWaiting":false,...}.

Examples:
  mongolock inspect nightly
  mongolock inspect --json exports
`

func (c *cli) listCommand() *command {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	cmd := &command{name: "list", synopsis: "list [flags] [PREFIX]", help: listHelp, flags: fs}
	cmd.run = func(args []string) error {
		pos, rest, err := c.parseArgs(cmd, args, 1)
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			return fail(exitUsage, "list: one prefix at most, not %q too", rest[0])
		}
		prefix := strings.Join(pos, "")
		s, err := c.conn.open()
		if err != nil {
			return err
		}
		defer s.close()
		out := newPrinter(c.stdout, *asJSON)
		ctx, cancel := s.ctx()
		defer cancel()
		for info, err := range s.p.Locks(ctx, prefix) {
			if err != nil {
				out.flush()
				return serverError(err)
			}
			out.lock(info)
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
		out := newPrinter(c.stdout, *asJSON)
		found := false
		switch info, err := s.p.Inspect(ctx, name); {
		case err == nil:
			found = true
			out.lock(info)
		case !errors.Is(err, mongolock.ErrNoLock):
			return serverError(err)
		}
		// A Semaphore's Inspect reads either kind; an RWLock's document
		// has no n.
		switch sem, err := s.p.Semaphore(name, 1).Inspect(ctx); {
		case err == nil && sem.N > 0:
			found = true
			out.semaphore(sem)
		case err == nil:
			rw, err := s.p.RWLock(name).Inspect(ctx)
			if err != nil {
				return serverError(err)
			}
			found = true
			out.rwlock(rw)
		case !errors.Is(err, mongolock.ErrNoLock):
			return serverError(err)
		}
		if !found {
			return fail(exitFailed, "inspect: no lock, semaphore or reader-writer lock called %q in %s.%s", name, s.db, c.conn.collection)
		}
		return out.flush()
	}
	return cmd
}

// A printer prints locks as an aligned table, or as JSON lines.
type printer struct {
	json bool
	enc  *json.Encoder
	tw   *tabwriter.Writer
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	p := &printer{json: asJSON, enc: json.NewEncoder(w)}
	p.enc.SetEscapeHTML(false)
	if !asJSON {
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(p.tw, "NAME\tKIND\tHELD\tOWNER\tTOKEN\tACQUIRED\tEXPIRES\tWAITING\tVALUE")
	}
	return p
}

func (p *printer) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}

func (p *printer) row(cells ...string) {
	fmt.Fprintln(p.tw, strings.Join(cells, "\t"))
}

// The JSON forms: times in RFC 3339, absent when unknown.
type (
	lockJSON struct {
		Kind         string    `json:"kind"`
		Name         string    `json:"name"`
		Held         bool      `json:"held"`
		HeldBy       string    `json:"heldBy,omitempty"`
		Owner        string    `json:"owner"`
		Value        string    `json:"value,omitempty"`
		FencingToken int64     `json:"fencingToken"`
		AcquiredAt   time.Time `json:"acquiredAt,omitzero"`
		ExpiresAt    time.Time `json:"expiresAt,omitzero"`
		Waiting      bool      `json:"waiting"`
		ServerTime   time.Time `json:"serverTime"`
	}
	holderJSON struct {
		Owner        string    `json:"owner"`
		Mode         string    `json:"mode,omitempty"`
		FencingToken int64     `json:"fencingToken"`
		AcquiredAt   time.Time `json:"acquiredAt"`
		ExpiresAt    time.Time `json:"expiresAt"`
	}
	slotsJSON struct {
		Kind          string       `json:"kind"`
		Name          string       `json:"name"`
		N             int          `json:"n,omitempty"`
		Holders       []holderJSON `json:"holders"`
		FencingToken  int64        `json:"fencingToken"`
		WriterWaiting *bool        `json:"writerWaiting,omitempty"`
		ServerTime    time.Time    `json:"serverTime"`
	}
)

// heldBy names the library of a lock's holder: mongolock's acquisitions
// always have an owner.
func heldBy(info mongolock.LockInfo) string {
	switch {
	case !info.Held:
		return ""
	case info.Owner == "":
		return "DistributedLock.MongoDB"
	}
	return "mongolock"
}

func (p *printer) lock(info mongolock.LockInfo) {
	if p.json {
		_ = p.enc.Encode(lockJSON{Kind: "lock", Name: info.Name, Held: info.Held, HeldBy: heldBy(info), Owner: info.Owner,
			Value: info.Value, FencingToken: info.FencingToken, AcquiredAt: known(info.AcquiredAt),
			ExpiresAt: known(info.ExpiresAt), Waiting: info.Waiting, ServerTime: info.ServerTime})
		return
	}
	held, owner := "no", "-"
	if info.Held {
		held, owner = "yes", cell(info.Owner, 40)
		if info.Owner == "" {
			owner = "(" + heldBy(info) + ")"
		}
	}
	p.row(cell(info.Name, 64), "lock", held, owner, token(info.FencingToken), ago(info.AcquiredAt, info.ServerTime),
		ago(info.ExpiresAt, info.ServerTime), yesNo(info.Waiting), cell(info.Value, 40))
}

func (p *printer) semaphore(info mongolock.SemaphoreInfo) {
	held := fmt.Sprintf("%d/%d", len(info.Holders), info.N)
	if p.json {
		_ = p.enc.Encode(slotsJSON{Kind: "semaphore", Name: info.Name, N: info.N, Holders: holders(info.Holders, false),
			FencingToken: info.FencingToken, ServerTime: info.ServerTime})
		return
	}
	p.slots(info.Name, "semaphore", info.Holders, info.FencingToken, info.ServerTime, func(mongolock.HolderInfo) string { return held }, "-")
}

func (p *printer) rwlock(info mongolock.RWLockInfo) {
	if p.json {
		_ = p.enc.Encode(slotsJSON{Kind: "rwlock", Name: info.Name, Holders: holders(info.Holders, true),
			FencingToken: info.FencingToken, WriterWaiting: &info.WriterWaiting, ServerTime: info.ServerTime})
		return
	}
	waiting := "no"
	if info.WriterWaiting {
		waiting = "writer"
	}
	p.slots(info.Name, "rwlock", info.Holders, info.FencingToken, info.ServerTime, func(h mongolock.HolderInfo) string { return mode(h) }, waiting)
}

// slots prints one row per holder, or one row for none.
func (p *printer) slots(name, kind string, hs []mongolock.HolderInfo, last int64, now time.Time, held func(mongolock.HolderInfo) string, waiting string) {
	if len(hs) == 0 {
		free := "no"
		if kind == "semaphore" {
			free = held(mongolock.HolderInfo{})
		}
		p.row(cell(name, 64), kind, free, "-", token(last), "-", "-", waiting, "-")
	}
	for _, h := range hs {
		p.row(cell(name, 64), kind, held(h), cell(h.Owner, 40), token(h.FencingToken), ago(h.AcquiredAt, now), ago(h.ExpiresAt, now), waiting, "-")
	}
}

func holders(hs []mongolock.HolderInfo, rw bool) []holderJSON {
	out := []holderJSON{}
	for _, h := range hs {
		j := holderJSON{Owner: h.Owner, FencingToken: h.FencingToken, AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt}
		if rw {
			j.Mode = mode(h)
		}
		out = append(out, j)
	}
	return out
}

func mode(h mongolock.HolderInfo) string {
	if h.Write {
		return "write"
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
