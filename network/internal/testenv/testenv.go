// Package testenv runs the network controller against the shared envtest apiserver for the integration
// suites and the benchmark: a controller can be started, stopped and started again (a restart), with a
// client that counts every write it makes.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/envtest"
)

// Options is the envtest configuration of the network suites: no CAPI controllers (the add-on is
// independent of CAPI), our CRDs and webhooks.
func Options() envtest.Options {
	return envtest.Options{
		WithoutCAPIControllers: true,
		CRDDirectoryPaths:      []string{"network/config/crd/bases"},
		WebhookManifestPaths:   []string{"network/config/webhook/manifests.yaml"},
		AddToScheme:            []func(*runtime.Scheme) error{netv1.AddToScheme},
		Setup:                  func(_ context.Context, env *envtest.Environment) error { return setup.SetupWebhooks(env.Manager) },
	}
}

// CountingClient counts the writes that pass through it.
type CountingClient struct {
	client.Client
	writes atomic.Int64
}

// Writes is the number of writes so far.
func (c *CountingClient) Writes() int64 { return c.writes.Load() }

func (c *CountingClient) count(err error) error {
	if err == nil {
		c.writes.Add(1)
	}
	return err
}

func (c *CountingClient) log(obj client.Object, verb string) {
	if os.Getenv("YONDER_TEST_LOG_WRITES") != "" {
		fmt.Printf("write: %s %T %s\n", verb, obj, obj.GetName())
	}
}

// Create counts and creates.
func (c *CountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.log(obj, "Create")
	return c.count(c.Client.Create(ctx, obj, opts...))
}

// Update counts and updates.
func (c *CountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.log(obj, "Update")
	return c.count(c.Client.Update(ctx, obj, opts...))
}

// Patch counts and patches.
func (c *CountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.log(obj, "Patch")
	return c.count(c.Client.Patch(ctx, obj, patch, opts...))
}

// Delete counts and deletes.
func (c *CountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.log(obj, "Delete")
	return c.count(c.Client.Delete(ctx, obj, opts...))
}

// Status counts status writes too.
func (c *CountingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c *CountingClient
}

func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.log(obj, "status Update")
	return s.c.count(s.SubResourceWriter.Update(ctx, obj, opts...))
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.log(obj, "status Patch")
	return s.c.count(s.SubResourceWriter.Patch(ctx, obj, patch, opts...))
}

// Controller is a running yonder-net-controller (without webhooks: the environment serves them).
type Controller struct {
	*setup.Reconcilers
	// Client counts the controller's writes.
	Client *CountingClient
	cancel context.CancelFunc
	done   chan error
}

// Start starts a controller against the environment; Stop (or the test's cleanup) stops it.
func Start(t testing.TB, env *envtest.Environment, opts setup.Options) *Controller {
	t.Helper()
	scheme, err := setup.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatalf("failed to create the controller manager: %v", err)
	}
	cc := &CountingClient{Client: mgr.GetClient()}
	opts.Client, opts.SkipNameValidation = cc, true
	ctx, cancel := context.WithCancel(context.Background())
	rs, err := setup.SetupReconcilers(ctx, mgr, opts)
	if err != nil {
		cancel()
		t.Fatalf("failed to set up reconcilers: %v", err)
	}
	c := &Controller{Reconcilers: rs, Client: cc, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// Stop stops the controller and waits for it.
func (c *Controller) Stop() error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("controller did not stop within 30s")
	}
}

func ptr[T any](v T) *T { return &v }

// Cleanup deletes every network object and Node (all cluster-scoped, so tests in one package must not
// see each other's leftovers).
func Cleanup(ctx context.Context, c client.Client) error {
	var errs []error
	for _, o := range []client.Object{
		&netv1.SitePeering{}, &netv1.GatewayPool{}, &netv1.Site{}, &netv1.NodeNetwork{}, &netv1.RoutePlan{}, &netv1.PeerSlice{}, &corev1.Node{},
	} {
		if err := c.DeleteAllOf(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete all %T: %w", o, err))
		}
	}
	return errors.Join(errs...)
}
