package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// cli is what one invocation reads and writes.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           connFlags
	commands       []*command
	// global is mongolock's own flags, current the command being run's.
	global, current *flag.FlagSet
	// fromEnv holds, per flag set, the flags the environment set;
	// FlagSet.Visit sees only those the command line set.
	fromEnv map[*flag.FlagSet]map[string]bool
	// releaseJSON is release's --json.
	releaseJSON bool
}

// A command is one of mongolock's subcommands.
type command struct {
	name, synopsis, help string
	flags                *flag.FlagSet
	run                  func(args []string) error
}

// flagSets are the commands' flag sets.
func (c *cli) flagSets() []*flag.FlagSet {
	var sets []*flag.FlagSet
	for _, cmd := range c.commands {
		sets = append(sets, cmd.flags)
	}
	return sets
}

// envPrefix names the variables that set flags' defaults: MONGOLOCK_DB
// for --db, MONGOLOCK_EXPIRY for --expiry, and so on.
const envPrefix = "MONGOLOCK_"

// envName is the variable that sets flag name's default.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// setFromEnv sets each flag of fs that a variable of the environment names
// to that variable's value; but --version, and --force and --holder, which
// must be asked for where the release is. It sets the flag's value alone,
// so that fs.Visit still tells the command line's flags from these.
func (c *cli) setFromEnv(fs *flag.FlagSet) (err error) {
	set := map[string]bool{}
	c.fromEnv[fs] = set
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || f.Name == "version" || f.Name == "force" || f.Name == "holder" || err != nil {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = fail(exitUsage, "%s=%q: %v", envName(f.Name), v, serr)
			return
		}
		set[f.Name] = true
	})
	return err
}

// given returns the flags of fs that are set, on the command line or by
// the environment, once excludes is settled: of two flags that exclude
// each other (excludes[a] names b), one given on the command line wins
// over one that only the environment sets, which goes back to its
// default. Two from the same place are left for the command to refuse.
// A boolean flag counts only if true.
func (c *cli) given(fs *flag.FlagSet, excludes map[string][]string) map[string]bool {
	cmdLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cmdLine[f.Name] = true })
	on := func(name string) bool {
		f := fs.Lookup(name)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			return f.Value.String() == "true"
		}
		return cmdLine[name] || c.fromEnv[fs][name]
	}
	for a, bs := range excludes {
		for _, b := range bs {
			for _, p := range [][2]string{{a, b}, {b, a}} {
				won, lost := p[0], p[1]
				if cmdLine[won] && on(won) && !cmdLine[lost] && c.fromEnv[fs][lost] && on(lost) {
					f := fs.Lookup(lost)
					_ = f.Value.Set(f.DefValue) // a default always parses
					delete(c.fromEnv[fs], lost)
				}
			}
		}
	}
	set := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if cmdLine[f.Name] || c.fromEnv[fs][f.Name] {
			set[f.Name] = true
		}
	})
	return set
}

// parse parses flags of fs, for the command called name ("": mongolock
// itself); --help prints its help and ends the program.
func (c *cli) parse(fs *flag.FlagSet, name string, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if err := c.helpOf([]string{name}); err != nil {
			return err
		}
		return &exitError{code: 0} // helped: nothing else to do
	case err != nil:
		see := "mongolock help"
		if name != "" {
			see = "mongolock " + name + " --help"
		}
		return fail(exitUsage, "%s (%s lists the flags)", err, see)
	}
	return nil
}

// parseArgs parses fs's flags in args, which may stand before, between and
// after the first n positional arguments. It returns those (fewer if args
// has fewer) and the arguments after them, unparsed, without a leading
// "--".
func (c *cli) parseArgs(cmd *command, args []string, n int) (pos, rest []string, err error) {
	for {
		if err := c.parse(cmd.flags, cmd.name, args); err != nil {
			return nil, nil, err
		}
		left := cmd.flags.Args()
		ended := len(left) < len(args) && args[len(args)-len(left)-1] == "--"
		if ended || len(pos) == n || len(left) == 0 {
			k := min(n-len(pos), len(left))
			pos, rest = append(pos, left[:k]...), left[k:]
			if len(rest) > 0 && rest[0] == "--" {
				rest = rest[1:]
			}
			return pos, rest, c.checkValues(cmd.name)
		}
		pos, args = append(pos, left[0]), left[1:]
	}
}

// nameArg parses the arguments of a command that takes one name.
func (c *cli) nameArg(cmd *command, args []string) (string, error) {
	pos, rest, err := c.parseArgs(cmd, args, 1)
	switch {
	case err != nil:
		return "", err
	case len(pos) == 0:
		return "", fail(exitUsage, "%s: no name (mongolock %s --help)", cmd.name, cmd.name)
	case len(rest) > 0:
		return "", fail(exitUsage, "%s: one name, not %q too", cmd.name, rest[0])
	}
	return readName(cmd.name, pos[0])
}

func (c *cli) helpOf(args []string) error {
	if len(args) == 0 || args[0] == "" {
		fmt.Fprint(c.stdout, c.usage())
		return nil
	}
	for _, cmd := range c.commands {
		if cmd.name == args[0] {
			fmt.Fprintf(c.stdout, "Usage: mongolock %s\n\n%s\nFlags:\n%s\n%s", cmd.synopsis,
				strings.TrimLeft(cmd.help, "\n"), flagDefaults(cmd.flags), exitStatuses)
			return nil
		}
	}
	return fail(exitUsage, "unknown command %q (mongolock help lists the commands)", args[0])
}

func (c *cli) usage() string {
	var b strings.Builder
	b.WriteString("mongolock runs a command under a distributed lock on MongoDB, holds one across the steps\nof a script, and shows and frees locks, elections, semaphores and reader-writer locks.\n\nUsage:\n")
	for _, cmd := range c.commands {
		fmt.Fprintf(&b, "  mongolock %s\n", cmd.synopsis)
	}
	b.WriteString("  mongolock help [COMMAND]\n  mongolock --version\n\n")
	b.WriteString("Connection flags, for every command (before or after its name):\n")
	b.WriteString(flagDefaults(c.conn.sample()))
	b.WriteString(`
Every flag can come from the environment as MONGOLOCK_ and its name in capitals,
dashes as underscores (MONGOLOCK_URI, MONGOLOCK_DB, MONGOLOCK_COLLECTION,
MONGOLOCK_TIMEOUT, MONGOLOCK_EXPIRY, ...), but --force and --holder; the command
line wins, also over a variable whose flag it excludes (--try over MONGOLOCK_WAIT).
Without --uri or MONGOLOCK_URI, the URI is MONGODB_URI's.
`)
	b.WriteString("\n" + exitStatuses + "\n")
	b.WriteString(`Examples:
  export MONGODB_URI=mongodb://db.example.net/ops
  mongolock run nightly -- ./report.sh          # waits for the lock, then runs the report
  mongolock run --try nightly -- ./report.sh    # skips the run (status 75) if it is held
  mongolock acquire --expiry 30m deploy > deploy.lock   # held across steps: extend, release
  mongolock list
  mongolock inspect --json nightly
  mongolock release --force nightly
  mongolock release --force --holder ID exports   # one slot of a semaphore (inspect shows IDs)

mongolock help COMMAND shows a command's flags and examples.
`)
	return b.String()
}

// flagDefaults lists fs's flags: --name VALUE, then the usage and the
// default, indented and wrapped.
func flagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		b.WriteString("  --" + f.Name)
		if name != "" {
			b.WriteString(" " + name)
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		line := "\n     "
		for _, word := range strings.Fields(usage) {
			if len(line)+1+len(word) > 80 {
				b.WriteString(line)
				line = "\n     "
			}
			line += " " + word
		}
		b.WriteString(line + "\n")
	})
	return b.String()
}
