// Command mongolock runs a command under a distributed lock on MongoDB,
// holds one across the steps of a script, and shows and frees locks,
// elections, semaphores and reader-writer locks from a shell:
//
//	mongolock run [flags] NAME [--] CMD [ARGS...]
//	mongolock acquire [flags] NAME
//	mongolock extend [--ticket TICKET] [flags]
//	mongolock list [flags] [PREFIX]
//	mongolock inspect [flags] NAME
//	mongolock release --force [--holder ID] [flags] NAME
//	mongolock release [--ticket TICKET] [flags]
//	mongolock completion bash|zsh|fish
//
// Install it with
//
//	go install github.com/mongolock/mongolock/cmd/mongolock@latest
//
// and see mongolock help, or mongolock help COMMAND, for flags, exit
// statuses and examples. It uses the library's public API only, so what it
// does with a lock is what a Go program can do.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
)

func main() {
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(c.main(os.Args[1:]))
}

func (c *cli) main(args []string) int {
	err := c.dispatch(args)
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		if e.msg != "" {
			fmt.Fprintln(c.stderr, "mongolock: "+e.msg)
		}
		return e.code
	default:
		fmt.Fprintln(c.stderr, "mongolock: "+oneLine(err))
		return exitFailed
	}
}

// define makes mongolock's own flags (c.global) and its commands, each
// with the connection flags; version is --version's.
func (c *cli) define() (version *bool) {
	c.global = flag.NewFlagSet("mongolock", flag.ContinueOnError)
	version = c.global.Bool("version", false, "print the version and exit")
	c.conn.register(c.global)
	c.commands = []*command{c.runCommand(), c.acquireCommand(), c.extendCommand(), c.listCommand(), c.inspectCommand(), c.releaseCommand(), c.completionCommand()}
	for _, cmd := range c.commands {
		c.conn.register(cmd.flags)
	}
	return version
}

func (c *cli) dispatch(args []string) error {
	version := c.define()
	global := c.global
	// Defaults from the environment, before anything is parsed: the
	// command line wins, whichever flag set parses it.
	c.fromEnv = map[*flag.FlagSet]map[string]bool{}
	for _, fs := range append([]*flag.FlagSet{global}, c.flagSets()...) {
		if err := c.setFromEnv(fs); err != nil {
			return err
		}
	}
	if err := c.parse(global, "", args); err != nil {
		return err
	}
	args = global.Args()
	switch {
	case *version:
		fmt.Fprintln(c.stdout, "mongolock", moduleVersion(), runtime.Version())
		return nil
	case len(args) == 0:
		return fail(exitUsage, "no command (mongolock help lists the commands)")
	case args[0] == "help":
		return c.helpOf(args[1:])
	case args[0] == "version":
		fmt.Fprintln(c.stdout, "mongolock", moduleVersion(), runtime.Version())
		return nil
	}
	for _, cmd := range c.commands {
		if cmd.name == args[0] {
			c.current = cmd.flags
			return cmd.run(args[1:])
		}
	}
	return fail(exitUsage, "unknown command %q (mongolock help lists the commands)", args[0])
}
