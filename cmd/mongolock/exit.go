package main

import (
	"fmt"
	"strings"
)

// Exit statuses. run exits with its command's status otherwise, so these
// are numbers few programs use: sysexits' EX_UNAVAILABLE and EX_TEMPFAIL,
// and the one after it.
const (
	exitFailed      = 1   // nothing done: nothing called so, nothing held, not confirmed
	exitUsage       = 2   // bad flags or arguments, no URI or database
	exitUnavailable = 69  // could not talk to the server
	exitNotAcquired = 75  // run, acquire: the lock was held by someone else
	exitLost        = 76  // run: the lock was lost while the command ran; extend, release: a stale ticket
	exitNoExec      = 126 // run: the command could not be executed
	exitNotFound    = 127 // run: the command was not found
)

// exitStatuses is the help's account of the statuses above.
const exitStatuses = `Exit status:
  0        done; run: the command's own status (128+N if signal N ended it)
  1        nothing done: no such lock, a free lock not released, not confirmed
  2        bad flags or arguments, no URI or no database; release --force that
           got no answer (stdin ended: pass --yes)
  69       could not talk to the server (unreachable, or it refused the request)
  75       run, acquire: not acquired: the lock was held (--try, or --wait ran out)
  76       run: the lock was lost while the command ran (it got SIGTERM), or the
           release found it lost after the command exited, whatever its status;
           extend, release: the ticket is stale (its acquisition is over: lost)
  126, 127 run: the command could not be executed, or was not found
  130, 143 list --watch: ended by SIGINT or SIGTERM (128+N)
`

// exitError ends the program with code, after printing msg (if any) as
// one line on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// oneLine makes err's text one line, without a second "mongolock: ".
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "mongolock: ")), " ")
}
