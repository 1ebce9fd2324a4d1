package stack

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunTests is a test package's TestMain body for suites that share one stack: it starts the stack with
// opts (logging to stderr unless opts.Log is set), hands it to started, runs the tests and stops the stack.
// It returns the exit code for os.Exit: a stack that fails to start or to stop fails the run.
func RunTests(m *testing.M, opts Options, started func(*Stack)) int {
	if opts.Log == nil {
		opts.Log = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "stack: "+f+"\n", a...) }
	}
	// Starting takes about a minute on two cores after the builds; fifteen leave room for a machine loaded
	// by the packages that run beside this suite (hack/test.sh's second lane). The builds are bounded only
	// by the test binary's -timeout: a cold build cache, shared with another suite building the same
	// managers at once, took 9.5 minutes here and must not fail the suite.
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 15 * time.Minute
	}
	t0 := time.Now()
	s, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "failed to start the management stack: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "stack: up in %s (logs in %s)\n", time.Since(t0).Round(time.Second), s.Logs())
	started(s)
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to stop the stack: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
