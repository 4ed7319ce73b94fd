//go:build !unix

package main

import (
	"os"
	"syscall"
)

// Without process groups and signals, the command is killed where a Unix
// one would get a signal.
var forwardedSignals = []os.Signal{os.Interrupt}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func forward(p *os.Process, _ os.Signal) { _ = p.Kill() }

func terminate(p *os.Process) { _ = p.Kill() }

func killGroup(p *os.Process) { _ = p.Kill() }

func groupAlive(*os.Process) bool { return false }
