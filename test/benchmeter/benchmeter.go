// Package benchmeter reads what a benchmark spends beyond wall time, for the figures `make bench` reports
// (CPU seconds beside time; see hack/benchreport).
package benchmeter

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
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

// userHZ is the unit of the CPU times in /proc: USER_HZ, 100 on every architecture Linux runs on (the
// kernel converts to it for user space whatever its internal tick rate).
const userHZ = 100

// ProcessCPU is the user + system CPU time another process has used so far (its own threads, not its
// children), from /proc/<pid>/stat: what a benchmark reads for a peer it did not start itself, such as
// an apiserver or a daemon in a network namespace.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields after its end.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// MachineCPU is a sample of the whole machine's CPU time (/proc/stat): BusySince between two samples says
// how saturated the machine was, so a benchmark can tell "the code is slow" from "the cores were full".
type MachineCPU struct{ busy, total uint64 }

// ReadMachineCPU samples /proc/stat's aggregate line.
func ReadMachineCPU() (MachineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return MachineCPU{}, errors.New("malformed /proc/stat")
	}
	var m MachineCPU
	// Columns: user nice system idle iowait irq softirq steal (then guest times, already counted in user).
	// idle and iowait are not busy; steal is: the cores were taken, if not by us.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("malformed /proc/stat: %w", err)
		}
		m.total += n
		if i != 3 && i != 4 {
			m.busy += n
		}
	}
	return m, nil
}

// BusySince is the fraction (0–1) of all cores' time that was busy between earlier and m.
func (m MachineCPU) BusySince(earlier MachineCPU) float64 {
	if m.total <= earlier.total {
		return 0
	}
	return float64(m.busy-earlier.busy) / float64(m.total-earlier.total)
}
