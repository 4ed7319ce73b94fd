package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/backend"
)

// A lock across the steps of a shell script or a pipeline: acquire takes
// it and exits leaving it held for its lease; extend and release take it
// over by its ticket (mongolock.Provider.TakeOver) in a later step.

const acquireHelp = `
Acquires the lock NAME as run does (waiting up to --wait; --try makes one attempt,
and exits with 75 at once if it is held), prints a ticket of the acquisition and its
fencing token, and exits, leaving the lock held until its lease (--expiry) ends:
nothing extends it. A later step extends it (mongolock extend) or releases it
(mongolock release) by its ticket. --semaphore N holds one of N slots of a semaphore
(--units K: K of them), --read and --write a reader-writer lock, as with run.

It prints two lines that a shell can source, the second what run gives its command:

  MONGOLOCK_TICKET=mlt1_...
  MONGOLOCK_FENCING_TOKEN=1838491345503232

(--json: one object with "name", "ticket" and "fencingToken"). extend and release
read the ticket from --ticket or from MONGOLOCK_TICKET, which keeps it off their
command lines.

The ticket is a bearer credential for this acquisition: whoever presents it takes
the lock over while it is held (with their own access to the database; it gives
none). Keep it as a secret: in a file only the job can read, or the pipeline's
secret store, never in a log.

Examples:
  umask 077; mongolock acquire --expiry 30m deploy > deploy.lock
  . ./deploy.lock; MONGOLOCK_TICKET=$MONGOLOCK_TICKET mongolock release   # a later step
  mongolock acquire --try --semaphore 3 exports > exports.lock || exit
`

const extendHelp = `
Takes over the acquisition that the ticket (--ticket, or MONGOLOCK_TICKET) was made
of, while its lease lasts, with a fresh lease (--expiry), and prints its new ticket
and fencing token as acquire does: the old ticket is stale then, and the new token
is greater than the old one. The owner stays the acquisition's unless --owner names
a new one. A lock, a semaphore's slot, a reader or writer of a
reader-writer lock, an election's leadership: whatever acquire (or a Go program's
Handle.Ticket) made the ticket of. Nobody else can take the lock in between.

A ticket that is stale (its acquisition was released, taken over by its ticket
already, force released, or its lease ran out) is refused with status 76: the lock
was lost, and what it protects may have been changed by another holder since. Use
the same --db and --collection as the acquisition.

Examples:
  . ./deploy.lock    # acquire's or extend's output, its variables not exported
  umask 077; MONGOLOCK_TICKET=$MONGOLOCK_TICKET mongolock extend --expiry 30m > deploy.lock.new &&
    mv deploy.lock.new deploy.lock
`

// ticketFlags are acquire's and extend's flags, and release's --ticket.
type ticketFlags struct {
	ticket string
	asJSON bool
	runFlags
}

// registerTicket adds --ticket to fs.
func (f *ticketFlags) registerTicket(fs *flag.FlagSet) {
	fs.StringVar(&f.ticket, "ticket", "", "the `TICKET` of an acquisition, as acquire or extend printed it (default $MONGOLOCK_TICKET)")
}

func (c *cli) acquireCommand() *command {
	f := new(ticketFlags)
	fs := flag.NewFlagSet("acquire", flag.ContinueOnError)
	f.register(fs)
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	cmd := &command{name: "acquire", synopsis: "acquire [flags] NAME", help: acquireHelp, flags: fs}
	cmd.run = func(args []string) error {
		pos, rest, err := c.parseArgs(cmd, args, 1)
		switch {
		case err != nil:
			return err
		case len(pos) == 0:
			return fail(exitUsage, "acquire: no lock name (mongolock acquire --help)")
		case len(rest) > 0:
			return fail(exitUsage, "acquire: one name, not %q too", rest[0])
		}
		if err := c.checkAcquisition("acquire", &f.runFlags, c.given(fs, runExcludes)); err != nil {
			return err
		}
		name, err := readName("acquire", pos[0])
		if err != nil {
			return err
		}
		return c.acquireAndLeave(name, f)
	}
	return cmd
}

func (c *cli) extendCommand() *command {
	f := new(ticketFlags)
	fs := flag.NewFlagSet("extend", flag.ContinueOnError)
	f.registerTicket(fs)
	fs.DurationVar(&f.expiry, "expiry", mongolock.DefaultExpiry, "the new lease `DURATION` (100ms to 24h)")
	fs.StringVar(&f.owner, "owner", "", "who holds the lock (`NAME`) from now on, as list and inspect show it (default: the acquisition's owner, kept)")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	cmd := &command{name: "extend", synopsis: "extend [--ticket TICKET] [flags]", help: extendHelp, flags: fs}
	cmd.run = func(args []string) error {
		if _, rest, err := c.parseArgs(cmd, args, 0); err != nil {
			return err
		} else if len(rest) > 0 {
			return fail(exitUsage, "extend: takes no arguments, not %q", rest[0])
		}
		s, h, err := c.takeOver("extend", f, !c.fromCmdLine("owner") && !c.fromEnvironment("owner"))
		if err != nil {
			return err
		}
		return c.leave(s, h, f.asJSON)
	}
	return cmd
}

// acquireAndLeave acquires name as f says, prints its ticket, and leaves
// it to its lease.
func (c *cli) acquireAndLeave(name string, f *ticketFlags) error {
	s, err := c.conn.open(f.options()...)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	h, err := c.acquire(s, "acquire", name, &f.runFlags, sigs)
	if err != nil {
		s.close()
		return err
	}
	return c.leave(s, h, f.asJSON)
}

// takeOver takes over the acquisition of f's ticket, for the command cmd,
// and returns its handle, with the session to leave or close. With
// keepOwner, the taker is of the acquisition's owner, not of f's.
func (c *cli) takeOver(cmd string, f *ticketFlags, keepOwner bool) (*session, *mongolock.Handle, error) {
	if f.ticket == "" {
		return nil, nil, fail(exitUsage, "%s: no ticket: give --ticket or set MONGOLOCK_TICKET", cmd)
	}
	s, err := c.conn.open(f.options()...)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if keepOwner {
		if err := c.keepOwner(ctx, s, f); err != nil {
			s.close()
			return nil, nil, err
		}
	}
	h, err := s.p.TakeOver(ctx, f.ticket)
	if err == nil {
		return s, h, nil
	}
	s.close()
	switch {
	case errors.Is(err, mongolock.ErrStaleTicket):
		return nil, nil, fail(exitLost, "%s: %s (released, taken over by its ticket already, force released, or its lease ran out): nothing held", cmd, oneLine(err))
	case errors.Is(err, mongolock.ErrInvalidArgument):
		var le *mongolock.Error
		if errors.As(err, &le) && le.Name == "" { // not a ticket: it names nothing
			err = le.Err
		}
		return nil, nil, fail(exitUsage, "%s: %s", cmd, oneLine(err))
	case isServerError(err):
		return nil, nil, serverError(err)
	}
	return nil, nil, fail(exitFailed, "%s: %s", cmd, oneLine(err))
}

// keepOwner makes s's provider one of the owner of the acquisition of f's
// ticket, as the server has it: a take-over writes its provider's owner.
// An acquisition that is not found is left for the take-over to call
// stale; a string that is not a ticket, for it to refuse.
func (c *cli) keepOwner(ctx context.Context, s *session, f *ticketFlags) error {
	name, id, ok := backend.TicketHolder(f.ticket)
	if !ok {
		return nil
	}
	infos, err := named(ctx, s.p, name)
	if err != nil {
		return serverError(err)
	}
	for _, info := range infos {
		for _, h := range info.Holders {
			if h.ID != id || h.Owner == "" {
				continue
			}
			p, err := mongolock.NewProvider(s.client.Database(s.db), append(f.options(), mongolock.WithCollection(c.conn.collection), mongolock.WithOwner(h.Owner))...)
			if err != nil {
				return fail(exitFailed, "%s", oneLine(err))
			}
			_ = s.p.Close(ctx) // it holds nothing yet
			s.p = p
			return nil
		}
	}
	return nil
}

// leave prints h's ticket and fencing token, and ends the session without
// releasing h: the lock stays held until its lease ends, for a later step
// to take over by the ticket. The provider is not closed, as that would
// release h; the client is disconnected while h is still reachable, as a
// Handle that becomes unreachable is released by the garbage collector's
// cleanup, which needs the client.
func (c *cli) leave(s *session, h *mongolock.Handle, asJSON bool) error {
	ticket, err := h.Ticket()
	if err != nil {
		s.close()
		return fail(exitLost, "%s", oneLine(err))
	}
	if asJSON {
		err = json.NewEncoder(c.stdout).Encode(struct {
			Name         string `json:"name"`
			Ticket       string `json:"ticket"`
			FencingToken int64  `json:"fencingToken"`
		}{h.Name(), ticket, h.FencingToken()})
	} else {
		_, err = fmt.Fprintf(c.stdout, "MONGOLOCK_TICKET=%s\nMONGOLOCK_FENCING_TOKEN=%s\n", ticket, strconv.FormatInt(h.FencingToken(), 10))
	}
	s.disconnect()
	runtime.KeepAlive(h)
	if err != nil {
		return fail(exitFailed, "could not print the ticket of %q, held until its lease ends: %s", h.Name(), oneLine(err))
	}
	return nil
}

// releaseByTicket takes over the acquisition of f's ticket and releases
// it: the ticket's holder is checked by the take-over.
func (c *cli) releaseByTicket(f *ticketFlags) error {
	s, h, err := c.takeOver("release", f, false)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := s.ctx()
	defer cancel()
	if err := h.Release(ctx); err != nil {
		if errors.Is(err, mongolock.ErrLockLost) {
			return fail(exitLost, "release: %s", oneLine(err))
		}
		return fail(exitUnavailable, "release: %s; what the ticket held of %q stays held until its lease ends", reason(err), h.Name())
	}
	if c.releaseJSON {
		r := releasedOf(mongolock.LockInfo{Name: h.Name()}, nil)
		r.Holders = append(r.Holders, holderJSON{Owner: h.Owner(), FencingToken: h.FencingToken(), AcquiredAt: h.AcquiredAt()})
		return printReleased(c.stdout, []releasedJSON{r})
	}
	fmt.Fprintf(c.stdout, "released what the ticket held of %q (fencing token %d)\n", h.Name(), h.FencingToken())
	return nil
}
