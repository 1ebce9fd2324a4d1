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
func (a *Attachment) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := a.inNamespace(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		if c != nil {
			_ = c.Close()
		}
		return nil, err
	}
	return c, nil
}

// Listen opens a listener inside the attachment's namespace, as a server on that machine would: it
// accepts on the namespace's addresses only.
func (a *Attachment) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := a.inNamespace(func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return nil, err
	}
	return ln, nil
}

// inNamespace runs create (which opens a socket) on a thread switched into the attachment's namespace. A
// socket stays in the namespace it was created in: only its creation runs there, and the thread is switched
// back before it is released.
func (a *Attachment) inNamespace(create func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := a.runSwitched(create)
		ch <- err
		// A thread that could not be switched back is discarded (no UnlockOSThread: it exits with the goroutine).
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	return <-ch
}

// runSwitched runs create in the namespace on the calling (locked) thread; restored reports whether the
// thread is back in its own namespace. When it is not, the error says so and create's socket must not be used.
func (a *Attachment) runSwitched(create func() error) (restored bool, err error) {
	orig, err := netns.Get()
	if err != nil {
		return true, fmt.Errorf("failed to read the thread's network namespace: %w", err)
	}
	defer func() { _ = orig.Close() }()
	target, err := netns.GetFromPath(a.NamespacePath)
	if err != nil {
		return true, fmt.Errorf("failed to open namespace %s: %w", a.Namespace, err)
	}
	defer func() { _ = target.Close() }()
	if err := netns.Set(target); err != nil {
		return true, fmt.Errorf("failed to enter namespace %s: %w", a.Namespace, err)
	}
	createErr := create()
	if err := netns.Set(orig); err != nil {
		return false, fmt.Errorf("failed to leave namespace %s: %w", a.Namespace, err)
	}
	return true, createErr
}
