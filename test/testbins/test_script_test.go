package testbins_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/testbins"
)

// hack/test.sh (what `make test` runs) run for real on a small tree, against a stand-in `go` and a stand-in
// hack/fuzz.sh: the two lanes run at once, the benchmarks and fuzzing follow the other packages in their
// lane, every step runs even after a failure, and the last lines name what failed — all CI keeps of a run.

// testGoStandIn answers `go list` for a module of three packages (heavy, light, benched) and plays `go test`:
// the heavy lane waits (up to 10 s) until the other lane has started, and records whether it saw it; a step
// fails when $STUB_STATE/fail-<step> exists.
const testGoStandIn = `#!/bin/sh
echo "$YONDER_BENCH_TINY go $*" >>"$STUB_STATE/calls"
case "$1 $2" in
"list -m") echo example.test; exit 0 ;;
"list ./...") printf 'example.test/heavy\nexample.test/light\nexample.test/benched\n'; exit 0 ;;
"list ./heavy") echo example.test/heavy; exit 0 ;;
"list ./benched") echo example.test/benched; exit 0 ;;
"list ./nope") echo "no Go files in ./nope" >&2; exit 1 ;;
esac
if [ "$1" = build ]; then # go build -o <out> ./hack/testtimes: the real one, built by the test
  cp "$REAL_TESTTIMES" "$3"; exit 0
fi
case "$*" in
*-bench*) step=bench ;;
*./heavy*) step=heavy ;;
*) step=other ;;
esac
if [ "$step" = other ]; then touch "$STUB_STATE/other-started"; fi
if [ "$step" = heavy ]; then
  i=0
  while [ ! -e "$STUB_STATE/other-started" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$(expr "$i" + 1); done
  [ -e "$STUB_STATE/other-started" ] && echo overlap >>"$STUB_STATE/seen"
fi
if [ "$step" = heavy ]; then # go test -json, as cmd/test2json writes it
  p='"Package":"example.test/heavy"'
  out() { printf '{"Action":"output",%s,%s"Output":"%s\\n"}\n' "$p" "$1" "$2"; }
  t='"Test":"TestOf_heavy",'
  printf '{"Action":"run",%s,"Test":"TestOf_heavy"}\n' "$p"
  out "$t" "=== RUN   TestOf_heavy"
  if [ -e "$STUB_STATE/fail-heavy" ]; then
    out "$t" "    x_test.go:1: broken in heavy"
    out "$t" "        "
    out "$t" "        after a blank line"
    out "$t" "--- FAIL: TestOf_heavy (1.00s)"
    printf '{"Action":"fail",%s,"Test":"TestOf_heavy","Elapsed":1}\n' "$p"
    out "" "FAIL"
    out "" "FAIL\\texample.test/heavy\\t1.0s"
    printf '{"Action":"fail",%s,"Elapsed":1}\n' "$p"
    exit 1
  fi
  out "$t" "    x_test.go:1: a passing test's log"
  out "$t" "--- PASS: TestOf_heavy (1.00s)"
  printf '{"Action":"pass",%s,"Test":"TestOf_heavy","Elapsed":1}\n' "$p"
  out "" "PASS"
  out "" "ok  \\texample.test/heavy\\t1.0s"
  printf '{"Action":"pass",%s,"Elapsed":1}\n' "$p"
  exit 0
fi
if [ -e "$STUB_STATE/fail-$step" ]; then
  echo "--- FAIL: TestOf_$step (1.00s)"
  echo "    x_test.go:1: broken in $step"
  echo "        "
  echo "        after a blank line"
  echo "FAIL"
  echo "FAIL	example.test/$step	1.0s"
  exit 1
fi
echo "ok  	example.test/$step	1.0s"
`

// fuzzStandIn stands in for hack/fuzz.sh.
const fuzzStandIn = `#!/bin/sh
echo "fuzz" >>"$STUB_STATE/calls"
if [ -e "$STUB_STATE/fail-fuzz" ]; then echo "FAIL: fuzz target FuzzParse in ./light"; exit 1; fi
echo "fuzzing done"
`

func TestTestScriptRunsTwoLanesAndNamesWhatFailed(t *testing.T) {
	// The heavy lane's formatter is the real one (the stand-in go copies it where the script builds it).
	testtimes := filepath.Join(t.TempDir(), "testtimes")
	build := exec.Command("go", "build", "-o", testtimes, "./hack/testtimes")
	build.Dir = testbins.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/testtimes: %v: %s", err, out)
	}
	for _, tc := range []struct {
		name  string
		heavy string
		early string // EARLY_PKGS
		fail  []string
		exit  int
		want  []string
		// wantHeavy are in the heavy lane's lines alone: the lanes run at once, so another lane's line
		// may come between two of them in the whole output.
		wantHeavy []string
	}{
		{name: "all pass", heavy: "./heavy", exit: 0, want: []string{"make test: every step passed"},
			wantHeavy: []string{"[heavy] --- PASS: TestOf_heavy (1.00s)\n[heavy] ok  \texample.test/heavy\t1.0s\n"}},
		{name: "a heavy suite fails", heavy: "./heavy", fail: []string{"heavy"}, exit: 1,
			want: []string{"make test: FAILED: heavy", "== what failed in step heavy:\n--- FAIL: TestOf_heavy (1.00s)\n    x_test.go:1: broken in heavy\n        \n        after a blank line\nFAIL\texample.test/heavy\t1.0s\n"}},
		{name: "a light package and fuzzing fail", heavy: "./heavy", fail: []string{"other", "fuzz"}, exit: 1,
			want: []string{"make test: FAILED: fuzz other", "--- FAIL: TestOf_other", "== what failed in step fuzz:\nFAIL: fuzz target FuzzParse in ./light"}},
		{name: "a benchmark fails", heavy: "./heavy", fail: []string{"bench"}, exit: 1, want: []string{"make test: FAILED: bench", "--- FAIL: TestOf_bench"}},
		{name: "an early suite leads the other lane", heavy: "./heavy", early: "./benched", exit: 0, want: []string{"make test: every step passed"}},
		{name: "a heavy list that names no package", heavy: "./nope", exit: 1},
		{name: "an early list that names no package", heavy: "./heavy", early: "./nope", exit: 1},
		{name: "an early suite that is a heavy one", heavy: "./heavy", early: "./heavy", exit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tree, state, bin := t.TempDir(), t.TempDir(), t.TempDir()
			script, err := os.ReadFile(filepath.Join(testbins.RepoRoot(), "hack", "test.sh"))
			g.Expect(err).NotTo(HaveOccurred())
			for path, text := range map[string]string{"hack/test.sh": string(script), "hack/fuzz.sh": fuzzStandIn} {
				g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(tree, path)), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(filepath.Join(tree, path), []byte(text), 0o755)).To(Succeed())
			}
			g.Expect(os.WriteFile(filepath.Join(bin, "go"), []byte(testGoStandIn), 0o755)).To(Succeed())
			for _, f := range tc.fail {
				g.Expect(os.WriteFile(filepath.Join(state, "fail-"+f), nil, 0o600)).To(Succeed())
			}

			out, code := runScript(t, filepath.Join(tree, "hack", "test.sh"),
				"PATH="+bin+":/usr/bin:/bin", "STUB_STATE="+state, "REAL_TESTTIMES="+testtimes, "HEAVY_PKGS="+tc.heavy, "EARLY_PKGS="+tc.early, "BENCH_PKGS=./benched", "TEST_TIMEOUT=7m")
			g.Expect(code).To(Equal(tc.exit))
			calls, err := os.ReadFile(filepath.Join(state, "calls"))
			g.Expect(err).NotTo(HaveOccurred())
			if tc.heavy == "./nope" {
				g.Expect(out).To(ContainSubstring("make test: the heavy suites (./nope) are not all packages of example.test\n"))
				g.Expect(string(calls)).NotTo(ContainSubstring("go test"), "nothing runs when the heavy list is wrong")
				return
			}
			if tc.exit != 0 && tc.early != "" {
				g.Expect(out).To(ContainSubstring("make test: the early suites (" + tc.early + ") are not all packages of example.test outside the heavy suites\n"))
				g.Expect(string(calls)).NotTo(ContainSubstring("go test"), "nothing runs when the early list is wrong")
				return
			}
			for _, w := range tc.want {
				g.Expect(out).To(ContainSubstring(w))
			}
			var heavy strings.Builder
			for line := range strings.Lines(out) {
				if strings.HasPrefix(line, "[heavy] ") {
					heavy.WriteString(line)
				}
			}
			for _, w := range tc.wantHeavy {
				g.Expect(heavy.String()).To(ContainSubstring(w))
			}
			// Every step ran, whatever failed before it; the benchmarks at their tiny size, only in the
			// packages that have benchmarks.
			c := string(calls)
			g.Expect(c).To(ContainSubstring(" go test -count=1 -p 1 -ldflags=-w -json -timeout 7m ./heavy\n"))
			g.Expect(out).NotTo(ContainSubstring("a passing test's log"), "the heavy lane prints what plain go test would")
			lightPkgs := "example.test/light example.test/benched"
			if tc.early != "" {
				lightPkgs = "example.test/benched example.test/light" // the early suite first, then the rest in order
			}
			light := strings.Index(c, " go test -count=1 -p 1 -ldflags=-w -timeout 7m "+lightPkgs+"\n")
			bench := strings.Index(c, "1 go test -count=1 -ldflags=-w -run ^$ -bench . -benchtime 1x -timeout 7m ./benched\n")
			fuzz := strings.Index(c, "fuzz\n")
			g.Expect(light).To(BeNumerically(">=", 0))
			g.Expect(bench).To(BeNumerically(">", light), "the benchmarks follow the other packages")
			g.Expect(fuzz).To(BeNumerically(">", bench), "fuzzing comes last in its lane")
			seen, err := os.ReadFile(filepath.Join(state, "seen"))
			g.Expect(err).NotTo(HaveOccurred(), "the heavy lane never saw the other lane running")
			g.Expect(strings.TrimSpace(string(seen))).To(Equal("overlap"))
			// Each step's lines carry its name.
			g.Expect(out).To(ContainSubstring("[heavy] "))
			g.Expect(out).To(ContainSubstring("[other] "))
			g.Expect(out).To(ContainSubstring("[fuzz] "))
			// Each step says when it ended, so a CI log shows which lane is the critical path.
			for _, step := range []string{"heavy", "other", "bench", "fuzz"} {
				g.Expect(out).To(MatchRegexp(`(?m)^\[%s\] == %s done at \+\d+s$`, step, step))
			}
		})
	}
}
