package benchmeter

import (
	"os"
	"testing"
	"time"
)

// burn spends about d of this process's CPU time.
func burn(d time.Duration) {
	for start := SelfCPU(); SelfCPU()-start < d; {
		for i := 0; i < 1e5; i++ {
			_ = i * i
		}
	}
}

func TestProcessCPUAgreesWithGetrusage(t *testing.T) {
	burn(300 * time.Millisecond)
	// /proc counts in USER_HZ ticks: the two may differ by a couple of ticks per thread that ran.
	before := SelfCPU()
	got, err := ProcessCPU(os.Getpid())
	after := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	if got < before-100*time.Millisecond || got > after+100*time.Millisecond {
		t.Fatalf("ProcessCPU(self) = %s, getrusage says %s–%s", got, before, after)
	}
}

func TestProcessCPUOfAMissingProcessFails(t *testing.T) {
	// PIDs are below /proc/sys/kernel/pid_max (at most 2^22): this one cannot exist.
	if _, err := ProcessCPU(1 << 23); err == nil {
		t.Fatal("expected an error for a process that does not exist")
	}
}

func TestMachineCPUSeesThisProcessBusy(t *testing.T) {
	a, err := ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	burn(200 * time.Millisecond)
	b, err := ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	busy := b.BusySince(a)
	if busy <= 0 || busy > 1 {
		t.Fatalf("busy fraction while burning a core = %v, want in (0, 1]", busy)
	}
	if b.BusySince(b) != 0 {
		t.Fatal("no time between samples must read as 0, not a division by zero")
	}
}
