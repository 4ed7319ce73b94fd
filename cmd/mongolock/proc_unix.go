//go:build unix

package main

import (
	"os"
	"syscall"
)

// The signals mongolock passes on to the command.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// sysProcAttr puts the command in a process group of its own, so that
// signals reach whatever it starts too.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(a)
	return a
}

// forward sends sig to p's process group.
func forward(p *os.Process, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(-p.Pid, s)
	}
}

func terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

func killGroup(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }

// groupAlive reports whether a process of p's group is left.
func groupAlive(p *os.Process) bool { return syscall.Kill(-p.Pid, 0) == nil }
