package deathsig_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/deathsig"
)

// A child started by Start outlives the end of threads the runtime retires, as many as there are: each
// goroutine below locks its thread and exits locked, which ends the thread. A child forked from one of those
// threads with a plain Pdeathsig would be killed; this one runs until it is stopped.
func TestChildSurvivesRetiredThreads(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command("sleep", "60")
	child, err := deathsig.Start(cmd)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.SysProcAttr.Pdeathsig).To(Equal(syscall.SIGKILL))
	for range 200 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
	}
	g.Consistently(child.Done(), time.Second, 50*time.Millisecond).ShouldNot(BeClosed())
	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(child.Done(), 10*time.Second).Should(BeClosed())
	g.Expect(child.Err()).To(MatchError(ContainSubstring("terminated")))
}

// The same thread churn kills a child forked with Pdeathsig from an ordinary goroutine's thread: what Start
// exists for. The child is started from a goroutine that then retires its own thread.
func TestPlainPdeathsigDiesWithItsThread(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		started <- cmd.Start()
		// exits locked: the thread that forked the child ends
	}()
	g.Expect(<-started).To(Succeed())
	err := cmd.Wait()
	g.Expect(err).To(MatchError(ContainSubstring("killed")))
}

func TestStartReportsAFailedStart(t *testing.T) {
	cmd := exec.Command("sleep", "1")
	cmd.Dir = filepath.Join(t.TempDir(), "missing") // the child cannot start there
	_, err := deathsig.Start(cmd)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("no such file or directory")))
}
