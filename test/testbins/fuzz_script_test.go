package testbins_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/testbins"
)

// hack/fuzz.sh run for real on a one-target tree, against a stand-in `go` that plays each way a fuzz run
// can end. Go 1.26's coordinator sometimes fails a target with a bare "context deadline exceeded" at the end
// of -fuzztime (go.dev/issue/75804): such a run is tried once more, while a run that wrote a failing input,
// or failed any other way, fails at once.

// fuzzGoStandIn plays the outcomes listed in $STUB_STATE/outcomes, one line per call: pass, deadline
// (Go's deadline race: the bare error, nothing written), crash (a failing input written, as Go does) or
// broken (a compile error).
const fuzzGoStandIn = `#!/bin/sh
n=$(wc -l <"$STUB_STATE/calls" 2>/dev/null || echo 0)
echo "go $*" >>"$STUB_STATE/calls"
outcome=$(sed -n "$((n + 1))p" "$STUB_STATE/outcomes")
case "$outcome" in
pass) echo "PASS"; echo "ok  	example.test/pkg	10.1s" ;;
deadline) echo "--- FAIL: FuzzParse (10.12s)"; echo "    context deadline exceeded"; echo FAIL; exit 1 ;;
crash)
  mkdir -p pkg/testdata/fuzz/FuzzParse
  echo "go test fuzz v1" >pkg/testdata/fuzz/FuzzParse/0123abcd
  echo "--- FAIL: FuzzParse (3.02s)"; echo "    --- FAIL: FuzzParse (0.00s)"; echo "        panic: index out of range"
  echo "    Failing input written to testdata/fuzz/FuzzParse/0123abcd"; exit 1 ;;
*) echo "pkg/parse_test.go:3:1: syntax error" >&2; exit 1 ;;
esac
`

func TestFuzzScriptRetriesOnlyGosDeadlineRace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outcomes []string
		calls    int
		exit     int
		parallel string // FUZZPARALLEL
	}{
		{name: "passes", outcomes: []string{"pass"}, calls: 1, exit: 0},
		{name: "passes with one worker (make test's FUZZPARALLEL=1)", outcomes: []string{"pass"}, calls: 1, exit: 0, parallel: "1"},
		{name: "deadline race, then passes", outcomes: []string{"deadline", "pass"}, calls: 2, exit: 0},
		{name: "deadline race twice", outcomes: []string{"deadline", "deadline"}, calls: 2, exit: 1},
		{name: "a failing input is never retried", outcomes: []string{"crash", "pass"}, calls: 1, exit: 1},
		{name: "a broken package is never retried", outcomes: []string{"broken", "pass"}, calls: 1, exit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tree, state, bin := t.TempDir(), t.TempDir(), t.TempDir()
			script, err := os.ReadFile(filepath.Join(testbins.RepoRoot(), "hack", "fuzz.sh"))
			g.Expect(err).NotTo(HaveOccurred())
			for path, text := range map[string]string{
				"hack/fuzz.sh":         string(script),
				"pkg/parse_test.go":    "package pkg\n\nfunc FuzzParse(f *testing.F) {}\n",
				"hack/tools/x_test.go": "package tools\n\nfunc FuzzNotOurs(f *testing.F) {}\n", // hack/ is not fuzzed
			} {
				g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(tree, path)), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(filepath.Join(tree, path), []byte(text), 0o755)).To(Succeed())
			}
			g.Expect(os.WriteFile(filepath.Join(bin, "go"), []byte(fuzzGoStandIn), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(state, "outcomes"), []byte(strings.Join(tc.outcomes, "\n")+"\n"), 0o600)).To(Succeed())

			out, code := runScript(t, filepath.Join(tree, "hack", "fuzz.sh"), "PATH="+bin+":/usr/bin:/bin", "STUB_STATE="+state, "FUZZTIME=10s", "FUZZPARALLEL="+tc.parallel)
			g.Expect(code).To(Equal(tc.exit))
			calls, err := os.ReadFile(filepath.Join(state, "calls"))
			g.Expect(err).NotTo(HaveOccurred())
			lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
			g.Expect(lines).To(HaveLen(tc.calls))
			want := "go test -run ^$ -fuzz ^FuzzParse$ -fuzztime 10s -fuzzminimizetime 2s ./pkg"
			if tc.parallel != "" {
				want = "go test -run ^$ -fuzz ^FuzzParse$ -fuzztime 10s -fuzzminimizetime 2s -parallel " + tc.parallel + " ./pkg"
			}
			g.Expect(lines[0]).To(Equal(want))
			if tc.exit != 0 {
				g.Expect(out).To(ContainSubstring("FAIL: fuzz target FuzzParse in ./pkg"))
				if tc.outcomes[0] == "crash" { // the failing input is in the log itself: CI's clone is gone afterwards
					g.Expect(out).To(ContainSubstring("== failing input ./pkg/testdata/fuzz/FuzzParse/0123abcd:\ngo test fuzz v1"))
				}
			} else {
				g.Expect(out).To(ContainSubstring("fuzzing done: 1 targets for 10s each, 0 with a failure"))
			}
		})
	}
}

// runScript runs a repository script with bash in exactly the environment env; it returns the combined
// output (also logged) and the exit status, and fails the test when bash itself could not run.
func runScript(t *testing.T, script string, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", filepath.Base(script), out)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("failed to run %s: %v", script, err)
	}
	return string(out), 0
}
