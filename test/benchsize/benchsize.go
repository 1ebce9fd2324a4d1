// Package benchsize lets every benchmark run at a tiny size in the test suite, so that none of them rots
// between `make bench` runs: `make test` runs each one once with YONDER_BENCH_TINY=1 and asserts no timing.
// A benchmark picks its sizes with Pick (full size for `make bench`, tiny otherwise).
package benchsize

import "os"

// Env is the environment variable that selects the tiny sizes.
const Env = "YONDER_BENCH_TINY"

// Tiny reports whether the benchmarks run at their tiny size.
func Tiny() bool { v := os.Getenv(Env); return v != "" && v != "0" && v != "false" }

// Pick returns tiny when the benchmarks run at their tiny size, else full.
func Pick[T any](full, tiny T) T {
	if Tiny() {
		return tiny
	}
	return full
}
