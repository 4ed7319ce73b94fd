package main

import (
	"flag"
	"time"

	"github.com/mongolock/mongolock"
)

// src names what set the flag name of the command being run, as its
// errors say it: the variable of the environment (MONGOLOCK_EXPIRY) if
// that set it and the command line did not, else the flag (--expiry).
func (c *cli) src(name string) string {
	if c.fromCmdLine(name) || !c.fromEnvironment(name) {
		return "--" + name
	}
	return envName(name)
}

// srcValue is src with the flag's value: "--expiry 1s", or
// "MONGOLOCK_EXPIRY=1s"; a boolean flag's name alone, or its variable's
// setting.
func (c *cli) srcValue(name string) string {
	f := c.lookup(name)
	if f == nil {
		return "--" + name
	}
	v := f.Value.String()
	switch s := c.src(name); {
	case s != "--"+name:
		return s + "=" + v
	case isBool(f):
		return s
	default:
		return s + " " + v
	}
}

// lookup finds the flag name in the command being run's flags, or in
// mongolock's own (the connection flags before the command's name).
func (c *cli) lookup(name string) *flag.Flag {
	for _, fs := range []*flag.FlagSet{c.current, c.global} {
		if fs == nil {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// fromCmdLine reports whether the command line set the flag name, before
// or after the command's name.
func (c *cli) fromCmdLine(name string) bool {
	set := false
	for _, fs := range []*flag.FlagSet{c.current, c.global} {
		if fs != nil {
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		}
	}
	return set
}

// fromEnvironment reports whether a variable of the environment set the
// flag name (and no flag on the command line excluded it).
func (c *cli) fromEnvironment(name string) bool {
	return c.fromEnv[c.current][name] || c.fromEnv[c.global][name]
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// A bound is the range of a duration flag outside which a value is surely
// a mistake.
type bound struct {
	min, max time.Duration
	low      string // what is said below min
}

// Days of a month: a monthly job's period, the longest a hold or a wait
// that a schedule asks for.
const month = 31 * 24 * time.Hour

// bounds are the duration flags' ranges; docs/cli.md says why each.
var bounds = map[string]bound{
	// A lease is how long a lock stays stuck after its holder died: a
	// longer hold extends it, or takes its ticket over, in between.
	"expiry": {100 * time.Millisecond, 24 * time.Hour, "the lease must be at least 100ms"},
	// Beyond a month a wait is forever, which is the default.
	"wait": {0, month, "must not be negative"},
	// A command that ignores SIGTERM for an hour is stuck, not finishing.
	"grace": {0, time.Hour, "must not be negative"},
	// A schedule's period: a monthly job's at the longest.
	"hold-at-least": {0, month, "must not be negative"},
	"hold-at-most":  {0, month, "must not be negative"},
	// Each request waits this long for the server: an hour is no answer.
	"timeout": {time.Nanosecond, time.Hour, "must be positive"},
	// list --watch's poll: often enough to see a lease of the shortest,
	// seldom enough to see anything at all.
	"interval": {100 * time.Millisecond, time.Hour, "must be at least 100ms"},
}

// checkValues refuses a value of the command being run's flags that is
// out of its range, naming what set it: a duration beyond its bound, an
// owner too long, an empty collection.
func (c *cli) checkValues(cmd string) error {
	var err error
	c.current.VisitAll(func(f *flag.Flag) {
		if err == nil {
			err = c.checkValue(cmd, f)
		}
	})
	return err
}

func (c *cli) checkValue(cmd string, f *flag.Flag) error {
	if b, ok := bounds[f.Name]; ok {
		d := f.Value.(flag.Getter).Get().(time.Duration)
		switch {
		case d < b.min:
			return fail(exitUsage, "%s: %s: %s", cmd, c.srcValue(f.Name), b.low)
		case d > b.max:
			return fail(exitUsage, "%s: %s: at most %v", cmd, c.srcValue(f.Name), b.max)
		}
	}
	switch v := f.Value.String(); {
	case f.Name == "owner" && len(v) > mongolock.MaxOwnerLen:
		return fail(exitUsage, "%s: %s: at most %d bytes, not %d", cmd, c.src(f.Name), mongolock.MaxOwnerLen, len(v))
	case f.Name == "collection" && v == "":
		return fail(exitUsage, "%s: %s: must not be empty", cmd, c.src(f.Name))
	}
	return nil
}

// excluded returns an error naming the first two of names that are both
// on, for the command cmd, or nil.
func (c *cli) excluded(cmd string, on map[string]bool, names ...string) error {
	var given []string
	for _, n := range names {
		if on[n] {
			given = append(given, c.src(n))
		}
	}
	if len(given) < 2 {
		return nil
	}
	return fail(exitUsage, "%s: %s and %s exclude each other", cmd, given[0], given[1])
}
