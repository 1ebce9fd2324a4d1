// Package harness holds what Yonder's integration suites repeat: a provider's reconcilers run in a manager
// of their own that a test can stop and start again like a crashing controller (Provider), the workload
// control plane a package's tests share (Workload), and a Cluster attached to it (AttachedCluster).
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/yonder-dev/yonder/pkg/managercache"
	"github.com/yonder-dev/yonder/test/controlplane"
)

// Provider is a running instance of a provider's reconcilers (a manager process).
type Provider struct {
	cancel context.CancelFunc
	done   chan error
}

// StartProvider starts the reconcilers setup registers in a manager of their own, with the client
// options every Yonder manager uses, against the apiserver of cfg. The provider stops when the test ends.
func StartProvider(t testing.TB, cfg *rest.Config, scheme *runtime.Scheme, setup func(ctx context.Context, mgr ctrl.Manager) error) *Provider {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 managercache.ClientOptions(),
	})
	if err != nil {
		t.Fatalf("failed to create the provider manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		t.Fatalf("failed to set up the provider's reconcilers: %v", err)
	}
	p := &Provider{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- mgr.Start(ctx) }()
	t.Cleanup(p.Stop)
	return p
}

// Kill stops the provider at once, without waiting for it, as a process that dies: in-flight reconciles
// see a cancelled context. Stop waits for it afterwards.
func (p *Provider) Kill() { p.cancel() }

// Stop stops the provider (like a killed controller) and waits until its manager has returned.
func (p *Provider) Stop() {
	if p.done == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "provider manager stopped with: %v\n", err)
	}
	p.done = nil
}

// Workload is a workload control plane that the tests of one package share, started on first use.
type Workload struct {
	// Name names the control plane (its directory, its certificates).
	Name string

	once sync.Once
	cp   *controlplane.ControlPlane
	err  error
}

// Get returns the running control plane, starting it on first use; it fails the test when it cannot.
func (w *Workload) Get(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	w.once.Do(func() { w.cp, w.err = controlplane.Start(context.Background(), controlplane.Options{Name: w.Name}) })
	if w.err != nil {
		t.Fatalf("failed to start the workload control plane %s: %v", w.Name, w.err)
	}
	return w.cp
}

// Stop stops the control plane if it was started (for TestMain, after the tests).
func (w *Workload) Stop() {
	if w.cp != nil {
		_ = w.cp.Stop()
	}
}
