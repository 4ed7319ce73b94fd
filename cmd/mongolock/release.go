package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mongolock/mongolock"
)

const releaseHelp = `
Ends whatever acquisitions hold NAME, of any process (a mongolock run, a Go program, a
DistributedLock.MongoDB service): the holder of the lock or election NAME, and every
holder of the semaphore or reader-writer lock NAME. It is the operator's way out when a
holder is stuck. --holder ID ends that one acquisition only (a semaphore's slot, a
reader, the writer, a lock's holder), as inspect NAME lists them; the other holders keep
theirs. The fencing token is kept, so the next holder's token is greater than the old
holders', and a resource that checks tokens refuses their writes. A waiter gets the
freed lock or slot at once. The old holders are not told at once: a mongolock holder
finds out at its next extension, within a third of its expiry (a mongolock run then
stops its command), or at its release if that comes first (a mongolock run exits with
76 either way); until then only fencing tokens keep its writes out.

It shows the holders and asks for confirmation, reading y or yes from stdin, unless
--yes is given; anything else releases nothing and exits with 1, and no answer at all
(stdin ends first: no terminal, /dev/null) exits with 2 and says to pass --yes. A NAME
that nothing holds (with --holder: that ID does not hold) is refused, with status 1; so
is one whose holders were released, or whose leases ran out, while it asked.

With --ticket TICKET (or MONGOLOCK_TICKET), and no NAME, it releases the acquisition
that acquire or extend printed the ticket of, at once, in place of its holder: it takes
it over by the ticket (nobody can get in between), then releases it, and prints what it
released. It needs no --force, and asks nothing. A stale ticket (its acquisition was
released, taken over, force released, or its lease ran out) releases nothing, with
status 76: the lock was lost before.

--json prints, one object per line, each lock released and the holders it ended, as
list has them: {"name":"nightly","kind":"lock","holders":[{"id":"...","owner":"web-1/4242",
"fencingToken":1757930000000000001,"acquiredAt":"...","expiresAt":"..."}]}; with
--ticket, the holder that took it over to release it (its owner and token).

Examples:
  mongolock release --force nightly
  mongolock release --force --yes nightly    # in a script
  mongolock inspect exports                  # lists the holders' IDs
  mongolock release --force --holder 5f0c4b0e9d2a7c1e8b3f6a4d2c1e0f9a exports
  . ./deploy.lock; MONGOLOCK_TICKET=$MONGOLOCK_TICKET mongolock release   # acquire's output
`

func (c *cli) releaseCommand() *command {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	force := fs.Bool("force", false, "required: release what someone else holds")
	holder := fs.String("holder", "", "release only the acquisition `ID` (inspect lists them)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	fs.BoolVar(&c.releaseJSON, "json", false, "print what was released as JSON, one object per line")
	t := &ticketFlags{runFlags: runFlags{expiry: mongolock.DefaultExpiry}}
	t.registerTicket(fs)
	cmd := &command{name: "release", synopsis: "release --force [--holder ID] [flags] NAME, or --ticket TICKET [flags]", help: releaseHelp, flags: fs}
	cmd.run = func(args []string) error {
		pos, rest, err := c.parseArgs(cmd, args, 1)
		if err != nil {
			return err
		}
		set := c.given(fs, map[string][]string{"ticket": {"force", "holder"}})
		switch {
		case set["ticket"] && (*force || set["holder"]):
			return fail(exitUsage, "release: --ticket and --force exclude each other")
		case set["ticket"] && len(pos) > 0:
			return fail(exitUsage, "release: --ticket takes no name, not %q", pos[0])
		case set["ticket"]:
			return c.releaseByTicket(t)
		case len(pos) == 0:
			return fail(exitUsage, "release: no name, and no --ticket (mongolock release --help)")
		case len(rest) > 0:
			return fail(exitUsage, "release: one name, not %q too", rest[0])
		case !*force:
			return fail(exitUsage, "release: give --force: it ends someone else's acquisition (a mongolock run releases its own when its command exits)")
		}
		name, err := readName("release", pos[0])
		if err != nil {
			return err
		}
		return c.forceRelease(name, *holder, *yes)
	}
	return cmd
}

// forceRelease ends what holds name, or only the acquisition id if not "".
func (c *cli) forceRelease(name, id string, yes bool) error {
	s, err := c.conn.open()
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := s.ctx()
	defer cancel()
	infos, err := named(ctx, s.p, name)
	if err != nil {
		return serverError(err)
	}
	if len(infos) == 0 {
		return fail(exitFailed, "release: no lock, election, semaphore or reader-writer lock called %q in %s.%s: nothing to release", name, s.db, c.conn.collection)
	}
	what, was, ended, err := toRelease(name, id, infos)
	if err != nil {
		return err
	}
	if !yes {
		if err := c.confirm(name, fmt.Sprintf("Release %s, %s? [y/N] ", what, was)); err != nil {
			return err
		}
	}
	// A new time limit: the answer may have taken a while.
	ctx, cancel = s.ctx()
	defer cancel()
	var released bool
	if id == "" {
		released, err = s.p.ForceRelease(ctx, name)
	} else {
		released, err = s.p.ForceReleaseHolder(ctx, name, id)
	}
	switch {
	case err != nil:
		return serverError(err)
	case !released:
		return fail(exitFailed, "release: %q is held no more (released, or its lease ran out, meanwhile): nothing released", name)
	}
	if c.releaseJSON {
		return printReleased(c.stdout, ended)
	}
	fmt.Fprintf(c.stdout, "released %s (was %s; the next holder's token will be greater)\n", what, was)
	return nil
}

// releasedJSON is what release --json prints of each lock it released:
// its name and kind, and the holders it ended, as list has them.
type releasedJSON struct {
	Name       string         `json:"name"`
	NameQuoted bool           `json:"nameQuoted,omitempty"`
	Kind       mongolock.Kind `json:"kind,omitempty"`
	Holders    []holderJSON   `json:"holders"`
}

// releasedOf is what release --json prints of info's holders hs.
func releasedOf(info mongolock.LockInfo, hs []mongolock.HolderInfo) releasedJSON {
	j := infoJSONOf(info)
	r := releasedJSON{Name: j.Name, NameQuoted: j.NameQuoted, Kind: j.Kind, Holders: []holderJSON{}}
	for _, h := range j.Holders {
		if slices.ContainsFunc(hs, func(x mongolock.HolderInfo) bool { return x.ID == h.ID }) {
			r.Holders = append(r.Holders, h)
		}
	}
	return r
}

func printReleased(w io.Writer, released []releasedJSON) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range released {
		if err := enc.Encode(r); err != nil {
			return fail(exitFailed, "could not print what was released: %s", oneLine(err))
		}
	}
	return nil
}

// confirm asks question on stderr and reads the answer from stdin: nil
// for y or yes. An input that ends before any answer (none from a
// terminal, /dev/null, a closed pipe) is a refusal that says --yes.
func (c *cli) confirm(name, question string) error {
	fmt.Fprint(c.stderr, question)
	answer, err := bufio.NewReader(c.stdin).ReadString('\n')
	if !isTerminal(c.stdin) { // nobody typed the answer's newline
		fmt.Fprintln(c.stderr)
	}
	a := strings.ToLower(strings.TrimSpace(answer))
	switch {
	case a == "y" || a == "yes":
		return nil
	case err != nil && answer == "":
		return fail(exitUsage, "release: no answer (its input ended): %q not released; pass --yes to release without asking", name)
	}
	return fail(exitFailed, "release: %q not released", name)
}

// toRelease says what a release of name (of its holder id, if not "")
// ends, and who holds it, as words and as JSON, or why there is nothing
// to end.
func toRelease(name, id string, infos []mongolock.LockInfo) (what, was string, released []releasedJSON, err error) {
	var held []string
	for _, info := range infos {
		if id == "" && info.Held {
			held = append(held, describe(info, info.Holders))
			released = append(released, releasedOf(info, info.Holders))
		}
		for _, h := range info.Holders {
			if id != "" && h.ID == id {
				one := []mongolock.HolderInfo{h}
				return fmt.Sprintf("holder %s of %q", id, name), describe(info, one), []releasedJSON{releasedOf(info, one)}, nil
			}
		}
	}
	switch {
	case id != "":
		return "", "", nil, fail(exitFailed, "release: %q has no holder %s (mongolock inspect lists them): nothing to release", name, id)
	case len(held) > 0:
		return strconv.Quote(name), strings.Join(held, ", and "), released, nil
	case len(infos) == 1 && isLock(infos[0]):
		return "", "", nil, fail(exitFailed, "release: %q is not held (its last lease ended %s): nothing to release", name, ago(infos[0].ExpiresAt, infos[0].ServerTime))
	}
	return "", "", nil, fail(exitFailed, "release: %q is not held: nothing to release", name)
}

// describe says who holds info: hs, its holders or one of them.
func describe(info mongolock.LockInfo, hs []mongolock.HolderInfo) string {
	var who []string
	for _, h := range hs {
		owner := cell(h.Owner, 40)
		if h.Owner == "" {
			owner = "DistributedLock.MongoDB"
		}
		who = append(who, fmt.Sprintf("%s since %s, fencing token %d", owner, ago(h.AcquiredAt, info.ServerTime), h.FencingToken))
	}
	by := "held by "
	switch {
	case info.Kind == mongolock.KindElection:
		by = "an election led by "
	case info.Kind == mongolock.KindSemaphore:
		by = fmt.Sprintf("a semaphore of %d slots held by ", info.N)
	case info.Kind == mongolock.KindRWLock && info.Holders[0].Write:
		by = "a reader-writer lock held for writing by "
	case info.Kind == mongolock.KindRWLock:
		by = "a reader-writer lock held for reading by "
	}
	return by + strings.Join(who, "; ")
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
