package mongolock

import (
	"syscall"
	"time"
	"unsafe"
)

// clockBoottime is CLOCK_BOOTTIME: CLOCK_MONOTONIC plus the time the
// machine was suspended.
const clockBoottime = 7

// boot reads CLOCK_BOOTTIME; false if the kernel refuses (a sandbox that
// filters the call).
func (systemClocks) boot() (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
