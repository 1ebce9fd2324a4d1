package topo

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// RunIn runs f on a fresh OS thread switched into namespace ns. The thread is never switched back: it exits
// with the goroutine, so no other goroutine ever runs in the test namespace by accident. Code that starts
// goroutines which create sockets later must not rely on this (run a process in the namespace instead).
func RunIn(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		done := false
		// A failed assertion (t.FailNow → Goexit) inside f must still release the caller.
		defer func() {
			if !done {
				errc <- fmt.Errorf("function running in namespace %s did not return", ns)
			}
		}()
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- fmt.Errorf("failed to open namespace %s: %w", ns, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("failed to enter namespace %s: %w", ns, err)
			return
		}
		err = f()
		done = true
		errc <- err
	}()
	return <-errc
}
