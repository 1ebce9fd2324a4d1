// Package benchmeter reads what a benchmark spends beyond wall time, for the figures `make bench` reports
// (CPU seconds beside time; see hack/benchreport).
package benchmeter

import (
	"syscall"
	"time"
)

// CPU is the user + system CPU time of who (syscall.RUSAGE_SELF: this process; RUSAGE_CHILDREN: its
// waited-for children), or 0 if the kernel does not say.
func CPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SelfCPU is this process's user + system CPU time.
func SelfCPU() time.Duration { return CPU(syscall.RUSAGE_SELF) }
