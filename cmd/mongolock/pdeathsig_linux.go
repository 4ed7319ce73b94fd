package main

import "syscall"

// setParentDeathSignal has the command killed if mongolock dies: its lease
// would not be extended any more.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
