// Package sample is what testtimes's test runs `go test -json` on: a passing test, a failing one (only
// when TESTTIMES_SAMPLE_FAIL is set, so that nothing else ever sees it fail), and subtests.
package sample

import (
	"os"
	"testing"
)

func TestPasses(t *testing.T) {
	t.Log("a passing test's log, which plain go test does not print")
	t.Run("sub", func(t *testing.T) {})
}

func TestFails(t *testing.T) {
	if os.Getenv("TESTTIMES_SAMPLE_FAIL") == "" {
		return
	}
	t.Log("said before failing")
	t.Run("inner", func(t *testing.T) {
		t.Error("--- a line that looks like a diff's header")
	})
}
