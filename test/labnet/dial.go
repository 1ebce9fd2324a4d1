package labnet

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"
)

// DialContext opens a connection from inside the attachment's namespace, so in-process clients (an
// http.Transport's DialContext) reach the lab network with the namespace's address as a host there would.
// A socket stays in the namespace it was created in: only its creation runs on a thread switched into
// the namespace, and the thread is switched back before it is released.
func (a *Attachment) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, restored, err := a.dialInNamespace(ctx, network, address)
		ch <- result{c, err}
		// A thread that could not be switched back is discarded (no UnlockOSThread: it exits with the goroutine).
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.c, r.err
}

// dialInNamespace dials from the namespace on the calling (locked) thread; restored reports whether the
// thread is back in its own namespace.
func (a *Attachment) dialInNamespace(ctx context.Context, network, address string) (c net.Conn, restored bool, err error) {
	orig, err := netns.Get()
	if err != nil {
		return nil, true, fmt.Errorf("failed to read the thread's network namespace: %w", err)
	}
	defer func() { _ = orig.Close() }()
	target, err := netns.GetFromPath(a.NamespacePath)
	if err != nil {
		return nil, true, fmt.Errorf("failed to open namespace %s: %w", a.Namespace, err)
	}
	defer func() { _ = target.Close() }()
	if err := netns.Set(target); err != nil {
		return nil, true, fmt.Errorf("failed to enter namespace %s: %w", a.Namespace, err)
	}
	var d net.Dialer
	c, dialErr := d.DialContext(ctx, network, address)
	if err := netns.Set(orig); err != nil {
		if c != nil {
			_ = c.Close()
		}
		return nil, false, fmt.Errorf("failed to leave namespace %s: %w", a.Namespace, err)
	}
	return c, true, dialErr
}
