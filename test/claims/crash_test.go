package claims_test

import (
	"context"
	"errors"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errKilled is what every write of a killed provider returns.
var errKilled = errors.New("killed")

// killableClient lets every call through until it is killed, and from then on fails every write, as a
// process that died. The clients below embed it and decide, in Update, the instant it dies.
type killableClient struct {
	client.Client

	mu   sync.Mutex
	dead bool
}

func (c *killableClient) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

func (c *killableClient) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
}

// Patch implements client.Writer.
func (c *killableClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if c.isDead() {
		return errKilled
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Create implements client.Writer.
func (c *killableClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if c.isDead() {
		return errKilled
	}
	return c.Client.Create(ctx, obj, opts...)
}

// Delete implements client.Writer.
func (c *killableClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if c.isDead() {
		return errKilled
	}
	return c.Client.Delete(ctx, obj, opts...)
}

// Status implements client.StatusClient.
func (c *killableClient) Status() client.SubResourceWriter {
	return &killableStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type killableStatus struct {
	client.SubResourceWriter
	c *killableClient
}

func (s *killableStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if s.c.isDead() {
		return errKilled
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *killableStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if s.c.isDead() {
		return errKilled
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// crashingClient lets every call through until the armed host write, performs it (after) or not
// (before), and from then on fails every write, as a process that died at that instant. The test then
// stops the provider.
type crashingClient struct {
	killableClient
	step  string
	after bool
	match func(client.Object) string
	fired chan struct{}
}

func newCrashingClient(p provider, step string, after bool) *crashingClient {
	return &crashingClient{step: step, after: after, match: p.step, fired: make(chan struct{})}
}

// Update implements client.Writer.
func (c *crashingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errKilled
	}
	if c.match(obj) != c.step {
		return c.Client.Update(ctx, obj, opts...)
	}
	if c.after {
		if err := c.Client.Update(ctx, obj, opts...); err != nil {
			// The write itself failed (a conflict): not the instant to die at.
			return err
		}
	}
	c.dead = true
	close(c.fired)
	return errKilled
}
