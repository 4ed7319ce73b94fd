package mongolock

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults, as in DistributedLock.MongoDB.
const (
	// DefaultCollection is the collection of the lock documents unless
	// WithCollection names another.
	DefaultCollection = "distributed_locks"
	// DefaultExpiry is a lease's length unless WithExpiry sets another.
	DefaultExpiry = 30 * time.Second
	// DefaultBusyWaitMin is the shortest sleep between a waiting Acquire's
	// attempts unless WithBusyWaitSleep sets another.
	DefaultBusyWaitMin = 10 * time.Millisecond
	// DefaultBusyWaitMax is the longest sleep between a waiting Acquire's
	// attempts unless WithBusyWaitSleep sets another.
	DefaultBusyWaitMax = 800 * time.Millisecond

	minExpiry           = 100 * time.Millisecond
	maxSafetyMargin     = time.Second
	safetyMarginDivisor = 10
	minCadenceDivisor   = 100
	// MaxOwnerLen bounds WithOwner's owner, in bytes.
	MaxOwnerLen = 256
)

// An Option configures a Lock or a Provider. Options are validated by New and
// NewProvider, which return an error naming the bad option and its value;
// nothing is silently clamped.
type Option func(*config)

type config struct {
	collection string
	expiry     time.Duration
	cadence    time.Duration // 0: expiry/3
	cadenceSet bool
	sleepMin   time.Duration
	sleepMax   time.Duration
	standby    time.Duration // 0: 16 x sleepMax
	adaptive   bool
	owner      string
	atLeast    time.Duration // WithHoldAtLeast; 0: none
	atMost     time.Duration // WithHoldAtMost; 0: none
	atMostSet  bool
	skew       time.Duration // WithMaxClockSkew
	telemetryConfig
}

// WithOwner sets who the locks' acquisitions say holds them, as inspection
// and elections show it. The owner must be 1 to MaxOwnerLen bytes long,
// valid UTF-8. Default: the host name and process id, as "host/pid".
//
// It identifies; it does not exclude: two providers with the same owner
// still exclude each other.
func WithOwner(owner string) Option {
	return func(o *config) { o.owner = owner }
}

// defaultOwner is "host/pid" of this process.
var defaultOwner = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
})

// WithCollection sets the collection that holds the lock documents
// (default "distributed_locks", the same as DistributedLock.MongoDB).
//
// Semaphores and RWLocks live beside it, in "<name>_semaphores". The name
// must be one MongoDB accepts: not empty, valid UTF-8, without "$" or NUL,
// not beginning with "system.", and "<database>.<name>_semaphores" at most
// 255 bytes (a sharded collection's namespace may have 235 at most, which
// the server checks).
func WithCollection(name string) Option {
	return func(o *config) { o.collection = name }
}

// WithExpiry sets the lease: how long the server keeps a lock for a holder
// that stops extending it (crashed, partitioned). At least 100ms; default 30s.
//
// It also bounds how long a crashed holder blocks everyone else. The server
// counts whole milliseconds: a fraction of a millisecond is dropped.
func WithExpiry(d time.Duration) Option {
	return func(o *config) { o.expiry = d }
}

// WithExtensionCadence sets how often a held lock's lease is extended
// (default expiry/3). It must be at least expiry/100 and at most
// (expiry - min(expiry/10, 1s)) / 2, less half WithMaxClockSkew's skew.
//
// That is from 300ms to 14.5s for an expiry of 30s, from 10ms to 450ms for
// 1s. So an extension that fails or comes back late is followed by another
// before the lease ends, and extensions never flood the server.
func WithExtensionCadence(d time.Duration) Option {
	return func(o *config) { o.cadence, o.cadenceSet = d, true }
}

// WithBusyWaitSleep sets the bounds of the sleep between attempts while
// Acquire waits for a held lock (default 10ms..800ms); 0 < min <= max.
//
// They bound the sleeps of the waiter that is next in line (its process
// claims the lock's next turn or free slot: it finds the lock free within
// max of its release), and of every waiter while the lock changes hands.
// The waiter next in line, and the one next after it, once they have seen
// how long holders keep the lock, look again after half that (or half as
// long as the holder has held so far, if longer): sooner than min where
// holders are quicker, but never within one round trip of the last look.
// A waiter that is not next in line sleeps longer while the lock stays
// with one holder, up to WithStandbySleep's bound.
func WithBusyWaitSleep(min, max time.Duration) Option {
	return func(o *config) { o.sleepMin, o.sleepMax = min, max }
}

// WithStandbySleep sets the longest sleep of a waiting Acquire that is not
// next in line while the lock stays with one holder, and of every waiter's
// poll where release events arrive. At least WithBusyWaitSleep's max.
//
// Default 16 times WithBusyWaitSleep's max. A waiter is not next in line
// while another process claims the next turn. It is what keeps a lock held
// for hours cheap to wait for; its cost: a lock that frees while no process
// claims it (its claimant has just taken it, and given it up at once) may
// stay free that long.
func WithStandbySleep(d time.Duration) Option {
	return func(o *config) { o.standby = d }
}

// WithAdaptiveBackoff makes Acquire's sleeps grow exponentially (x1.5 per
// failed attempt, from the busy-wait minimum up to its maximum, with +-20%
// jitter) instead of being drawn uniformly from [min, max]. Default false.
func WithAdaptiveBackoff(on bool) Option {
	return func(o *config) { o.adaptive = on }
}

// WithHoldAtLeast keeps a released lock held until d after its acquisition,
// by the server's clock. Default 0: a release frees the lock at once.
//
// It is for a job every replica starts at once that must run once per
// period, however soon it ends. Release (so Do and Close too) writes the
// hold into the document in its one round trip, so it outlasts the process,
// and hands the lock to no Acquire of this process; a failed release and a
// lease that runs out hold it too. Until the hold ends every process's
// Acquire is refused, and Inspect shows the lock held; ForceRelease ends
// it. An acquisition under which no job ran (nobody got its handle, a
// Composite call failed) is freed at once. The server counts whole
// milliseconds.
//
// It applies to locks (Lock, Do). A Semaphore's, an RWLock's or an
// Election's acquisitions with a Provider that has it return an error.
func WithHoldAtLeast(d time.Duration) Option {
	return func(o *config) { o.atLeast = d }
}

// WithHoldAtMost bounds how long one acquisition may hold a lock: its lease
// is extended to at most d after the acquisition, by the server's clock, so
// that a stuck job cannot keep the lock for ever. Default: no bound.
//
// The handle is then lost as it is when its lease runs out: Lost closes and
// Context ends with the cause ErrLockLost, a safety margin before the bound
// (min(expiry/10, 1s), and WithMaxClockSkew's skew), and Release and Do
// report ErrLockLost. The lock stays held until the bound, the job's time
// to stop, unless the lost handle's Release (call it once the job has
// stopped) frees it at once. d must be at least the expiry (WithExpiry),
// which an acquisition's lease lasts from the start, and at least
// WithHoldAtLeast's.
//
// It applies to locks, as WithHoldAtLeast.
func WithHoldAtMost(d time.Duration) Option {
	return func(o *config) { o.atMost, o.atMostSet = d, true }
}

// WithMaxClockSkew sets how far apart the replica set members' clocks may
// be: every local deadline comes d earlier, so that a holder is lost before
// anyone else gets in across a failover to a member up to d ahead.
//
// Default 0: members synchronised by NTP are within milliseconds of each
// other, which the safety margin (min(expiry/10, 1s), at least 10ms)
// covers. Give d where they may be further apart: no NTP, VMs resumed from
// a pause, a member whose clock is stepped. A loss at WithHoldAtMost's
// bound comes d earlier too. d must be under what the expiry leaves after
// the safety margin, and leave the cadence room: the cadence must be at
// most (expiry - margin - d) / 2.
func WithMaxClockSkew(d time.Duration) Option {
	return func(o *config) { o.skew = d }
}

// buildConfig is the configuration opts make for a provider over the
// database named db, and why MongoDB or the library would refuse it.
func buildConfig(db string, opts []Option) (config, error) {
	o := config{collection: DefaultCollection, expiry: DefaultExpiry, sleepMin: DefaultBusyWaitMin, sleepMax: DefaultBusyWaitMax, owner: defaultOwner(),
		telemetryConfig: telemetryConfig{logger: slog.New(slog.DiscardHandler)}}
	for _, opt := range opts {
		if opt == nil {
			return o, invalid("nil Option")
		}
		opt(&o)
	}
	if !o.cadenceSet {
		o.cadence = o.expiry / 3
	}
	return o, cmp.Or(o.check(), checkNamespace(db, o.collection))
}

// check validates the options, WithHoldAtLeast's and WithHoldAtMost's last.
func (o config) check() error {
	least, most := o.expiry/minCadenceDivisor, (o.expiry-o.safetyMargin())/2
	switch err := o.telemetryConfig.check(); {
	case o.owner == "" || len(o.owner) > MaxOwnerLen:
		return invalidf("WithOwner(%q): the owner must be 1 to %d bytes long", shortName(o.owner), MaxOwnerLen)
	case !utf8.ValidString(o.owner):
		return invalidf("WithOwner(%q): the owner must be valid UTF-8, as BSON's strings are", shortName(o.owner))
	case err != nil:
		return err
	case checkCollection(o.collection) != nil:
		return checkCollection(o.collection)
	case o.expiry < minExpiry:
		return invalidf("WithExpiry(%v): the expiry must be at least %v", o.expiry, minExpiry)
	case o.cadence < least:
		return invalidf("WithExtensionCadence(%v): the cadence must be at least %v, a hundredth of the expiry (%v)", o.cadence, least, o.expiry)
	case o.cadence > most:
		return invalidf("WithExtensionCadence(%v): the cadence must be at most %v, half of what the expiry (%v) leaves after the safety margin (%v), so that a failed extension is retried before the lease ends",
			o.cadence, most, o.expiry, o.safetyMargin())
	case o.sleepMin <= 0 || o.sleepMin > o.sleepMax:
		return invalidf("WithBusyWaitSleep(%v, %v): need 0 < min <= max", o.sleepMin, o.sleepMax)
	case o.standby != 0 && o.standby < o.sleepMax:
		return invalidf("WithStandbySleep(%v): the standby sleep must be at least the busy-wait max (%v)", o.standby, o.sleepMax)
	}
	return cmp.Or(o.checkSkew(), o.checkHolds())
}

// checkSkew validates WithMaxClockSkew: it must leave a lease, and the
// cadence room for a failed extension's retry within it.
func (o config) checkSkew() error {
	left := o.expiry - o.safetyMargin()
	switch {
	case o.skew < 0:
		return invalidf("WithMaxClockSkew(%v): the skew must not be negative", o.skew)
	case o.skew >= left:
		return invalidf("WithMaxClockSkew(%v): the skew must be under what the expiry (%v) leaves after the safety margin (%v); lengthen WithExpiry", o.skew, o.expiry, o.safetyMargin())
	case o.cadence > (left-o.skew)/2:
		return invalidf("WithMaxClockSkew(%v): the cadence (%v) must be at most %v, half of what the expiry (%v) leaves after the safety margin (%v) and the skew, so that a failed extension is retried before the lease ends; shorten WithExtensionCadence or lengthen WithExpiry",
			o.skew, o.cadence, (left-o.skew)/2, o.expiry, o.safetyMargin())
	}
	return nil
}

// semSuffix names the semaphores' collection after the locks'.
const semSuffix = "_semaphores"

// MongoDB's limits of names, from 4.4 on.
const (
	maxDatabaseName = 63  // bytes: fewer than 64
	maxNamespace    = 255 // bytes of "<database>.<collection>" of an unsharded collection
	// badDatabaseChars may not be in a database name: those MongoDB
	// refuses on Windows, a superset of those it refuses elsewhere, so that
	// a name works on every server.
	badDatabaseChars = "/\\. \"$*<>:|?\x00"
)

// checkCollection refuses a WithCollection name that MongoDB would refuse,
// for the locks' collection or the semaphores' beside it.
func checkCollection(name string) error {
	var why string
	switch {
	case name == "":
		why = "the collection name must not be empty"
	case !utf8.ValidString(name):
		why = "the collection name must be valid UTF-8"
	case strings.ContainsAny(name, "$\x00"):
		why = "the collection name must not contain \"$\" or NUL"
	case strings.HasPrefix(name, "system."):
		why = "names beginning with \"system.\" are MongoDB's own"
	default:
		return nil
	}
	return invalidf("WithCollection(%q): %s", shortName(name), why)
}

// checkNamespace refuses a database name that MongoDB would refuse on some
// platform, and a collection name whose semaphores' collection would make
// too long a namespace in db.
func checkNamespace(db, coll string) error {
	ns := len(db) + len(".") + len(coll) + len(semSuffix)
	switch {
	case db == "" || len(db) > maxDatabaseName:
		return invalidf("the database name %q: it must be 1 to %d bytes long", shortName(db), maxDatabaseName)
	case !utf8.ValidString(db) || strings.ContainsAny(db, badDatabaseChars):
		return invalidf("the database name %q: it must be valid UTF-8, without any of %q", shortName(db), badDatabaseChars)
	case ns > maxNamespace:
		return invalidf("WithCollection(%q): the semaphores' collection beside it (%s) in the database %q makes a namespace of %d bytes, more than MongoDB's %d",
			shortName(coll), "<collection>"+semSuffix, shortName(db), ns, maxNamespace)
	}
	return nil
}

// checkHolds validates WithHoldAtLeast and WithHoldAtMost.
func (o config) checkHolds() error {
	switch {
	case o.atLeast < 0:
		return invalidf("WithHoldAtLeast(%v): the hold must not be negative", o.atLeast)
	case !o.atMostSet:
		return nil
	case o.atMost < o.expiry:
		return invalidf("WithHoldAtMost(%v): the hold must be at least the expiry (%v), which an acquisition's lease lasts from the start; shorten WithExpiry", o.atMost, o.expiry)
	case o.atMost < o.atLeast:
		return invalidf("WithHoldAtMost(%v): the hold must be at least WithHoldAtLeast's (%v)", o.atMost, o.atLeast)
	}
	return nil
}

// holdOptionSet reports whether WithHoldAtLeast or WithHoldAtMost is set.
func (o config) holdOptionSet() bool { return o.atLeast > 0 || o.atMostSet }

// safetyMargin is how much earlier than the server the client considers its
// lease over: a tenth of the expiry, at most a second (10ms at the shortest
// expiry). It covers clocks that run at different rates and $$NOW's own
// truncation to the millisecond; the cadence never shrinks it. The members'
// clock skew (WithMaxClockSkew) comes on top of it.
func (o config) safetyMargin() time.Duration {
	return min(o.expiry/safetyMarginDivisor, maxSafetyMargin)
}

// clientLease is how long after sending a successful acquisition or
// extension the client holds the lock: the expiry the server adds to its
// $$NOW (whole milliseconds), less the safety margin and the skew.
func (o config) clientLease() time.Duration {
	return o.expiry.Truncate(time.Millisecond) - o.earlier()
}

// earlier is how much sooner than the server's lease, or WithHoldAtMost's
// bound, the client's ends: the safety margin, and the members' skew, as a
// failover to a member whose clock is ahead ends the lease that much sooner.
func (o config) earlier() time.Duration { return o.safetyMargin() + o.skew }

// WithTrace sets hooks the provider calls on its operations' events.
// NewProvider copies them, so changing t later changes nothing. A nil
// Trace is an error.
//
// Given more than once, every Trace's hooks are called, in the order given,
// and the context an earlier start hook returns is passed to the later ones.
func WithTrace(t *Trace) Option {
	return func(o *config) {
		if t == nil {
			o.nilTrace = true
			return
		}
		o.trace = o.trace.then(t)
	}
}

// WithLogger sets where the provider logs. Default: it logs nothing. A nil
// logger is an error.
//
// It logs losses and handles dropped while held (Warn), acquisitions
// released in the background because nobody got their handle, and failures
// to create the TTL index (Info), and transient errors that are retried
// (Debug).
func WithLogger(l *slog.Logger) Option {
	return func(o *config) { o.logger = l }
}

// check validates what WithTrace and WithLogger set.
func (c telemetryConfig) check() error {
	switch {
	case c.nilTrace:
		return invalid("WithTrace(nil): pass hooks, or leave the option out")
	case c.logger == nil:
		return invalid("WithLogger(nil): pass a logger, or leave the option out to log nothing")
	}
	return nil
}
