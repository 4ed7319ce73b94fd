package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mongolock/mongolock"
)

// list --watch: the table, then a row for each change, as it is seen.
// It polls: change streams need a replica set, and a poll sees what a
// stream cannot, a lease that ran out with nothing written.

// A watch is what list --watch has printed: a snapshot of each lock by
// kind and name, and the table's column widths.
type watch struct {
	w      io.Writer
	asJSON bool
	seen   map[string]string // kind and name -> what changes show
	infos  map[string]mongolock.LockInfo
	widths []int
}

// watchEvent is a JSON line of list --watch: list's object, and what
// happened to it.
type watchEvent struct {
	Event string `json:"event"` // added, modified or deleted
	infoJSON
}

// watchList prints what prefix names, then each change every interval,
// until SIGINT or SIGTERM ends it, with 128+N; a request that fails ends
// it as list's would.
func (c *cli) watchList(s *session, prefix string, asJSON bool, interval time.Duration) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			cancel(interrupted{sig})
		case <-stop:
		}
	}()
	defer func() { close(stop); <-watched }()

	w := &watch{w: c.stdout, asJSON: asJSON, seen: map[string]string{}, infos: map[string]mongolock.LockInfo{}}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for first := true; ; first = false {
		if err := w.poll(ctx, s, prefix, first); err != nil {
			var sig interrupted
			if errors.As(context.Cause(ctx), &sig) {
				return fail(signalStatus(sig.sig), "")
			}
			return serverError(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// poll lists what prefix names and prints what changed since the last
// poll: everything, the first time, under the table's header.
func (w *watch) poll(ctx context.Context, s *session, prefix string, first bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now := map[string]mongolock.LockInfo{}
	for info, err := range s.p.Locks(ctx, prefix) {
		if err != nil {
			return err
		}
		now[string(info.Kind)+"\x00"+info.Name] = info
	}
	var rows [][]string
	for _, k := range sortedKeys(now, w.infos) {
		info, ok := now[k]
		event := "deleted"
		switch {
		case !ok:
			info = w.infos[k]
			delete(w.seen, k)
		case w.seen[k] == "":
			event = "added"
		case w.seen[k] == shows(info):
			continue
		default:
			event = "modified"
		}
		if ok {
			w.seen[k] = shows(info)
		}
		rows = append(rows, w.event(event, info)...)
	}
	w.infos = now
	return w.print(rows, first)
}

// event is what the watch prints of info's event: one JSON line, or a
// row of the table.
func (w *watch) event(event string, info mongolock.LockInfo) [][]string {
	if w.asJSON {
		b, _ := json.Marshal(watchEvent{event, infoJSONOf(info)})
		return [][]string{{string(b)}}
	}
	return [][]string{append([]string{strings.ToUpper(event)}, rowsOf(info, false)[0]...)}
}

// print prints rows, after the header the first time, with the columns
// as wide as the widest cell seen so far.
func (w *watch) print(rows [][]string, first bool) error {
	if w.asJSON {
		for _, r := range rows {
			if _, err := fmt.Fprintln(w.w, r[0]); err != nil {
				return err
			}
		}
		return nil
	}
	if first {
		rows = append([][]string{append([]string{"EVENT"}, header(false)...)}, rows...)
	}
	for _, r := range rows {
		for i, cell := range r {
			if i == len(w.widths) {
				w.widths = append(w.widths, 0)
			}
			w.widths[i] = max(w.widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, cell := range r[:len(r)-1] {
			b.WriteString(cell + strings.Repeat(" ", w.widths[i]-utf8.RuneCountInString(cell)+2))
		}
		b.WriteString(r[len(r)-1] + "\n")
	}
	_, err := io.WriteString(w.w, b.String())
	return err
}

// shows is what of info a watch prints a change of: not the times, which
// move at each extension and each poll, but who holds it, its token,
// whether it is held or waited for, and its value.
func shows(info mongolock.LockInfo) string {
	j := infoJSONOf(info)
	j.ServerTime, j.ExpiresAt, j.Claim, j.Next = time.Time{}, time.Time{}, nil, nil
	for i := range j.Holders {
		j.Holders[i].ExpiresAt = time.Time{}
	}
	b, _ := json.Marshal(j)
	return string(b)
}

// sortedKeys are the keys of a and b, in byte order of name, then kind.
func sortedKeys(a, b map[string]mongolock.LockInfo) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	byName := func(k string) string { kind, name, _ := strings.Cut(k, "\x00"); return name + "\x00" + kind }
	slices.SortFunc(sorted, func(x, y string) int { return strings.Compare(byName(x), byName(y)) })
	return sorted
}
