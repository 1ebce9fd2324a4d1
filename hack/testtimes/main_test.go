package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The real go test -json of a sample package, through testtimes: what plain go test prints for a
// failure, plus a line with each top-level test's time.
func TestPrintsTimesAndFailuresAsGoTestDoes(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command("go", "test", "-count=1", "-json", "./testdata/sample")
	cmd.Env = append(os.Environ(), "TESTTIMES_SAMPLE_FAIL=1")
	raw, err := cmd.Output()
	g.Expect(err).To(HaveOccurred(), "the sample fails when asked to")
	var out bytes.Buffer
	g.Expect(run(bytes.NewReader(raw), &out)).To(Succeed())
	got := out.String()

	g.Expect(got).To(MatchRegexp(`(?m)^--- PASS: TestPasses \(\d+\.\d\ds\)$`))
	g.Expect(got).To(MatchRegexp(`(?m)^--- FAIL: TestFails/inner \(\d+\.\d\ds\)\n    sample_test.go:\d+: --- a line that looks like a diff's header$`))
	g.Expect(got).To(MatchRegexp(`(?m)^--- FAIL: TestFails \(\d+\.\d\ds\)\n    sample_test.go:\d+: said before failing$`))
	g.Expect(got).To(MatchRegexp(`(?m)^FAIL\s+\S+/testdata/sample\s`))
	g.Expect(got).NotTo(ContainSubstring("a passing test's log"))
	g.Expect(got).NotTo(ContainSubstring("=== RUN"))
	g.Expect(got).NotTo(ContainSubstring("TestPasses/sub"), "only top-level times")

	// hack/test.sh's summary: a failing test and the indented lines under it.
	summary := regexp.MustCompile(`(?m)^\s*--- FAIL: .*\n(\s+\S.*\n)+`).FindAllString(got, -1)
	g.Expect(strings.Join(summary, "")).To(ContainSubstring("said before failing"))
}

// A package that dies (a timeout, a panic) never ends its running tests: their output is printed anyway;
// a skipped test is named with its reason (from synthetic events: no test of ours skips).
func TestUnfinishedTestsArePrinted(t *testing.T) {
	g := NewWithT(t)
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestSlow"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow","Output":"    slow_test.go:9: waiting for the Node\n"}`,
		`{"Action":"output","Package":"p","Output":"panic: test timed out after 45m0s\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t2700.001s\n"}`,
		`{"Action":"run","Package":"p","Test":"TestSkipped"}`,
		`{"Action":"output","Package":"p","Test":"TestSkipped","Output":"    x_test.go:3: the reason\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestSkipped","Elapsed":0}`,
		`{"Action":"fail","Package":"p","Elapsed":2700}`,
		`# a line that is not JSON`,
	}, "\n")
	var out bytes.Buffer
	g.Expect(run(strings.NewReader(in), &out)).To(Succeed())
	g.Expect(out.String()).To(Equal("panic: test timed out after 45m0s\nFAIL\tp\t2700.001s\n" +
		"--- SKIP: TestSkipped (0.00s)\n    x_test.go:3: the reason\n" +
		"--- FAIL: TestSlow (unfinished)\n    slow_test.go:9: waiting for the Node\n# a line that is not JSON\n"))
}

// Each subtest that passed and took a second or more gets a time line under its top-level test's, in the
// order the subtests started and indented by depth, as go test -v prints them; quick ones and those of a
// failed test get none (synthetic events: the times are the point).
func TestSlowSubtestsGetTimeLinesUnderTheirTest(t *testing.T) {
	g := NewWithT(t)
	ev := func(action, test string, elapsed float64) string {
		return fmt.Sprintf(`{"Action":%q,"Package":"p","Test":%q,"Elapsed":%g}`, action, test, elapsed)
	}
	in := strings.Join([]string{
		ev("run", "TestScenarios", 0), ev("run", "TestScenarios/scale", 0), ev("run", "TestScenarios/scale/to-5", 0),
		ev("pass", "TestScenarios/scale/to-5", 22.5), ev("pass", "TestScenarios/scale", 50), ev("run", "TestScenarios/quick", 0),
		ev("pass", "TestScenarios/quick", 0.4), ev("run", "TestScenarios/remediation", 0), ev("pass", "TestScenarios/remediation", 70.25),
		ev("pass", "TestScenarios", 121),
		ev("run", "TestBroken", 0), ev("run", "TestBroken/slow", 0), ev("pass", "TestBroken/slow", 3), ev("fail", "TestBroken", 4),
		`{"Action":"fail","Package":"p","Elapsed":125}`,
	}, "\n")
	var out bytes.Buffer
	g.Expect(run(strings.NewReader(in), &out)).To(Succeed())
	g.Expect(out.String()).To(Equal("--- PASS: TestScenarios (121.00s)\n" +
		"    --- PASS: TestScenarios/scale (50.00s)\n" +
		"        --- PASS: TestScenarios/scale/to-5 (22.50s)\n" +
		"    --- PASS: TestScenarios/remediation (70.25s)\n" +
		"--- FAIL: TestBroken (4.00s)\n"))
}

// A parent whose subtests run in parallel is reported by go test with its own function's time only
// (0.00s); its line gives the time from its start to its end instead, as go test -json's event times
// say. A test whose Elapsed is the longer keeps it (the events' times are rounded).
func TestParentOfParallelSubtestsGetsItsWallTime(t *testing.T) {
	g := NewWithT(t)
	ev := func(action, test, at string, elapsed float64) string {
		return fmt.Sprintf(`{"Time":"2026-12-06T22:%s","Action":%q,"Package":"p","Test":%q,"Elapsed":%g}`, at, action, test, elapsed)
	}
	in := strings.Join([]string{
		ev("run", "TestGroup", "04:39Z", 0), ev("run", "TestGroup/a", "04:39.1Z", 0), ev("run", "TestGroup/b", "04:39.2Z", 0),
		ev("pass", "TestGroup/b", "07:54Z", 194.67), ev("pass", "TestGroup/a", "09:22Z", 282.82), ev("pass", "TestGroup", "11:22Z", 0),
		ev("run", "TestAlone", "11:22Z", 0), ev("pass", "TestAlone", "13:44Z", 142.58),
		ev("run", "TestBroken", "13:44Z", 0), ev("run", "TestBroken/x", "13:44Z", 0), ev("fail", "TestBroken/x", "13:50Z", 6), ev("fail", "TestBroken", "14:00Z", 0),
	}, "\n")
	var out bytes.Buffer
	g.Expect(run(strings.NewReader(in), &out)).To(Succeed())
	g.Expect(out.String()).To(Equal("--- PASS: TestGroup (403.00s)\n" +
		"    --- PASS: TestGroup/a (282.82s)\n" +
		"    --- PASS: TestGroup/b (194.67s)\n" +
		"--- PASS: TestAlone (142.58s)\n" +
		"--- FAIL: TestBroken/x (6.00s)\n" +
		"--- FAIL: TestBroken (16.00s)\n"))
}
