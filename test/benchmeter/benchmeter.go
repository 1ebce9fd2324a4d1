// Package benchmeter reads what a benchmark spends beyond wall time, for the figures `make bench` reports
// (CPU seconds beside time; see hack/benchreport).
package benchmeter

import (
	"math"
	"slices"
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

// Percentile is the p-th percentile of xs by the nearest-rank method (the value at rank ⌈p/100·n⌉), so a
// figure is always one of the samples, never an interpolation between two; 0 for no samples.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}
