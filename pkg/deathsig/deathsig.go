// Package deathsig starts child processes that the kernel kills when this process dies, and only then.
//
// Linux sends the parent-death signal (PR_SET_PDEATHSIG, SysProcAttr.Pdeathsig) when the THREAD that forked
// the child exits, not when the process does, and the Go runtime ends threads while a process runs: a
// goroutine that exits while locked to its thread takes the thread with it, which is how the network
// namespace helpers give back a thread they moved into another namespace. A child forked from whichever
// thread the caller happened to run on is therefore SIGKILLed at random, long before its parent exits (seen:
// the Prometheus server of the gateway failover test died between two subtests, and the test failed on a
// refused connection). Start forks from a thread of its own that stays locked until the child has exited.
package deathsig

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Child is a child process started by Start.
type Child struct {
	done chan struct{}
	err  error
}

// Done is closed once the child has exited and been waited for.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is cmd.Wait's result, once Done is closed.
func (c *Child) Err() error {
	<-c.done
	return c.err
}

// Start starts cmd with SIGKILL as its parent-death signal (cmd.SysProcAttr's other settings are kept). The
// caller must not call cmd.Wait itself: Child says when the child has exited and how.
func Start(cmd *exec.Cmd) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	c := &Child{done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
		// Returning while still locked ends this thread: only now, with the child it forked gone.
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}
