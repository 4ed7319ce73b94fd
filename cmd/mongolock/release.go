package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mongolock/mongolock"
)

const releaseHelp = `
Ends whatever acquisition holds the lock NAME, of any process (a mongolock run, a Go
program, a DistributedLock.MongoDB service): the operator's way out when a holder is
stuck. The lock's fencing token is kept, so the next holder's token is greater than
the old holder's, and a resource that checks tokens refuses the old holder's writes.
The old holder is not told at once: a mongolock holder finds out at its next
extension, within a third of its expiry (a mongolock run then stops its command),
or at its release if that comes first (a mongolock run exits with 76 either way);
until then only fencing tokens keep its writes out.

It shows the holder and asks for confirmation, reading y or yes from stdin, unless
--yes is given; anything else (or no input) releases nothing and exits with 1. A
lock that is not held is refused, with status 1. Semaphores and reader-writer
locks cannot be released this way: their holders' leases end on their own.

Examples:
  mongolock release --force nightly
  mongolock release --force --yes nightly    # in a script
`

func (c *cli) releaseCommand() *command {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	force := fs.Bool("force", false, "required: release a lock someone else holds")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	cmd := &command{name: "release", synopsis: "release --force [flags] NAME", help: releaseHelp, flags: fs}
	cmd.run = func(args []string) error {
		name, err := c.nameArg(cmd, args)
		switch {
		case err != nil:
			return err
		case !*force:
			return fail(exitUsage, "release: give --force: it ends someone else's acquisition (a mongolock run releases its own when its command exits)")
		}
		return c.forceRelease(name, *yes)
	}
	return cmd
}

func (c *cli) forceRelease(name string, yes bool) error {
	s, err := c.conn.open()
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := s.ctx()
	defer cancel()
	info, err := s.p.Inspect(ctx, name)
	switch {
	case errors.Is(err, mongolock.ErrNoLock):
		return fail(exitFailed, "release: no lock called %q in %s.%s: nothing to release", name, s.db, c.conn.collection)
	case err != nil:
		return serverError(err)
	case !info.Held:
		return fail(exitFailed, "release: %q is not held (its last lease ended %s): nothing to release", name, ago(info.ExpiresAt, info.ServerTime))
	}
	holder := fmt.Sprintf("held by %s since %s, fencing token %d", cell(info.Owner, 40), ago(info.AcquiredAt, info.ServerTime), info.FencingToken)
	if info.Owner == "" {
		holder = fmt.Sprintf("held by %s since %s, fencing token %d", heldBy(info), ago(info.AcquiredAt, info.ServerTime), info.FencingToken)
	}
	if !yes {
		fmt.Fprintf(c.stderr, "Release %q, %s? [y/N] ", name, holder)
		answer, _ := bufio.NewReader(c.stdin).ReadString('\n')
		if !isTerminal(c.stdin) { // nobody typed the answer's newline
			fmt.Fprintln(c.stderr)
		}
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return fail(exitFailed, "release: %q not released", name)
		}
	}
	// A new time limit: the answer may have taken a while.
	ctx, cancel = s.ctx()
	defer cancel()
	released, err := s.p.ForceRelease(ctx, name)
	switch {
	case err != nil:
		return serverError(err)
	case !released:
		return fail(exitFailed, "release: %q was released meanwhile: nothing to release", name)
	}
	fmt.Fprintf(c.stdout, "released %q (was %s; the next holder's token will be greater)\n", name, holder)
	return nil
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
