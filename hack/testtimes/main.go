// Command testtimes turns `go test -json` into what plain `go test` prints (a failing test's output under
// its `--- FAIL` line, the packages' `ok`/`FAIL` lines), and adds one `--- PASS: TestX (12.34s)` line for
// every top-level test that passed, followed by a line for each of its subtests that passed and took a
// second or more, indented as `go test -v` indents them (`    --- PASS: TestX/scale (50.12s)`): where a
// scenario's time goes, without the noise of quick table cases. hack/test.sh runs the heavy suites through it, so a CI log tells how
// long each scenario took (the suite's budget is planned from those lines), while a failure still reads
// as it always did (hack/test.sh's summary looks for `--- FAIL:` and the indented lines under it).
//
// Usage: go test -json ./pkg/... 2>&1 | testtimes
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string // run, output, pass, fail, skip, build-output, …
	Package string
	Test    string
	Elapsed float64
	Output  string
	Time    time.Time
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	// Write errors stick in the bufio.Writer and come back from its last Flush.
	w := bufio.NewWriter(out)
	// Output of tests still running, by package and test: printed only if the test fails (or never ends).
	running := map[string]map[string][]string{}
	// The passed subtests worth a time line, by package and top-level test: printed under the top-level
	// test's own line when it passes (its end comes after theirs), in the order they started (a parent
	// before its own subtests, as go test -v prints them).
	subtests := map[string]map[string][]subtest{}
	order, started := map[string]int{}, 0 // the order tests started in, by package and test
	// When each top-level test started, by package and test: go test reports as a parent's Elapsed only its
	// own function's time, without the parallel subtests it waits for (TestSeparateClusters: 0.00s for
	// 403 s), so a top-level test's line gives the longer of Elapsed and the time between its run and end.
	began := map[string]time.Time{}
	s := bufio.NewScanner(in)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		line := s.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			_, _ = fmt.Fprintln(w, line) // a build error or anything else go test printed itself
			_ = w.Flush()
			continue
		}
		tests := running[e.Package]
		if tests == nil {
			tests = map[string][]string{}
			running[e.Package] = tests
		}
		switch {
		case e.Action == "build-output":
			_, _ = fmt.Fprint(w, e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" { // plain go test prints no PASS line for a passing package
				_, _ = fmt.Fprint(w, e.Output)
			}
		case e.Action == "output":
			if !isProgress(e.Output) && !result.MatchString(e.Output) {
				tests[e.Test] = append(tests[e.Test], e.Output)
			}
		case e.Action == "run" && e.Test != "":
			started++
			order[e.Package+"\x00"+e.Test] = started
			if !strings.Contains(e.Test, "/") {
				began[e.Package+"\x00"+e.Test] = e.Time
			}
		case e.Action == "pass" && e.Test != "":
			top, _, sub := strings.Cut(e.Test, "/")
			if subtests[e.Package] == nil {
				subtests[e.Package] = map[string][]subtest{}
			}
			switch {
			case !sub:
				_, _ = fmt.Fprintf(w, "--- PASS: %s (%.2fs)\n", e.Test, wall(e, began))
				subs := subtests[e.Package][top]
				slices.SortFunc(subs, func(a, b subtest) int { return a.started - b.started })
				for _, st := range subs {
					_, _ = fmt.Fprint(w, st.line)
				}
				delete(subtests[e.Package], top)
			case e.Elapsed >= minSubtestSeconds:
				indent := strings.Repeat("    ", strings.Count(e.Test, "/"))
				subtests[e.Package][top] = append(subtests[e.Package][top], subtest{
					started: order[e.Package+"\x00"+e.Test], line: fmt.Sprintf("%s--- PASS: %s (%.2fs)\n", indent, e.Test, e.Elapsed)})
			}
			delete(tests, e.Test)
		case (e.Action == "fail" || e.Action == "skip") && e.Test != "":
			verb := map[string]string{"fail": "FAIL", "skip": "SKIP"}[e.Action]
			if e.Action == "fail" || !strings.Contains(e.Test, "/") {
				_, _ = fmt.Fprintf(w, "--- %s: %s (%.2fs)\n", verb, e.Test, wall(e, began))
				for _, o := range tests[e.Test] {
					_, _ = fmt.Fprint(w, o)
				}
			}
			if !strings.Contains(e.Test, "/") {
				delete(subtests[e.Package], e.Test) // a failure's output is what counts, not its parts' times
			}
			delete(tests, e.Test)
		case e.Action == "fail" && e.Test == "":
			unfinished(w, tests) // a timeout or a panic ended the package while these ran
			delete(running, e.Package)
		case (e.Action == "pass" || e.Action == "skip") && e.Test == "":
			delete(running, e.Package)
		}
		_ = w.Flush()
	}
	for _, tests := range running {
		unfinished(w, tests)
	}
	if err := s.Err(); err != nil {
		return err
	}
	return w.Flush()
}

// wall is a test's time: its Elapsed, or for a top-level test (the only ones in began) the time from its
// run event to e (its end) when that is longer (a parent that waited for parallel subtests). Events
// without times (older go, synthetic input) give Elapsed.
func wall(e event, began map[string]time.Time) float64 {
	b := began[e.Package+"\x00"+e.Test]
	if b.IsZero() || e.Time.IsZero() {
		return e.Elapsed
	}
	return max(e.Elapsed, e.Time.Sub(b).Seconds())
}

// unfinished prints the output of tests that never reported an end, as failures.
func unfinished(w *bufio.Writer, tests map[string][]string) {
	for name, out := range tests {
		_, _ = fmt.Fprintf(w, "--- FAIL: %s (unfinished)\n", name)
		for _, o := range out {
			_, _ = fmt.Fprint(w, o)
		}
	}
}

// minSubtestSeconds is the shortest passed subtest that gets a time line.
const minSubtestSeconds = 1.0

// subtest is a passed subtest's time line and when it started.
type subtest struct {
	started int
	line    string
}

// result is go test's own line for a test's end, which testtimes prints itself.
var result = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): `)

// isProgress reports the lines that -json's implied -v adds and plain go test does not print.
func isProgress(o string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(o, p) {
			return true
		}
	}
	return false
}
