package lab

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// `lab check` refuses what it cannot check, before it connects anywhere, and writes no state then.
func TestCheckRefusesWithoutARunningLab(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	var out bytes.Buffer
	g.Expect(Check(context.Background(), dir, time.Minute, &out)).To(MatchError(ContainSubstring("no lab is running (no " + StatePath(dir) + ")")))
	g.Expect(Check(context.Background(), dir, 0, &out)).To(MatchError("--timeout 0s must be positive"))

	// A state whose supervisor is gone (this test's pid runs no `lab serve`).
	st := &State{PID: os.Getpid(), Dir: dir, Cluster: ClusterName, Ready: time.Now()}
	g.Expect(st.write()).To(Succeed())
	before, err := os.ReadFile(StatePath(dir))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Check(context.Background(), dir, time.Minute, &out)).To(MatchError(ContainSubstring("the lab supervisor (pid " + strconv.Itoa(os.Getpid()) + ") is not running")))
	after, err := os.ReadFile(StatePath(dir))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(before), "the state is left as it was")
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "no temporary file is left by the state's writes")

	g.Expect(recordCheck(dir, os.Getpid(), &PodCheck{Source: SourceCheck})).To(MatchError(ContainSubstring("is no longer running")), "a check never writes the state of a lab that went away")
}
