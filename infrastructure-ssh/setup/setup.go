// Package setup holds what main.go and the envtest suites share: the scheme, manager cache and client
// options, and the registration of the provider's reconcilers and webhooks.
package setup

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshcluster"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshhost"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
	"github.com/yonder-dev/yonder/infrastructure-ssh/webhooks/admission"
)

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-ssh-manager"

// Scheme returns the scheme the provider uses.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build scheme: %w", err)
		}
	}
	return s, nil
}

// Options configure the reconcilers.
type Options struct {
	// WatchFilterValue: reconcile only objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// Concurrency per controller.
	MachineConcurrency, HostConcurrency, ClusterConcurrency int
	// ProbeInterval: how often hosts are probed (default 5m).
	ProbeInterval time.Duration
	// PollInterval: how often a running bootstrap is checked (default 10s).
	PollInterval time.Duration
	// RetryInterval: first wait after an SSH failure (default 15s).
	RetryInterval time.Duration
	// CleanupRetries: cleanup attempts on delete before the operator must act (default 5).
	CleanupRetries int32
	// Dialer: how hosts are reached (default the real SSH dialer).
	Dialer sshexec.Dialer
	// SkipNameValidation lets tests register the controllers in several managers of one process.
	SkipNameValidation bool
}

// SetupReconcilers registers the provider's reconcilers with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Dialer == nil {
		o.Dialer = sshexec.SSHDialer{}
	}
	copts := func(n int) controller.Options {
		if n <= 0 {
			n = 10
		}
		opts := controller.Options{MaxConcurrentReconciles: n}
		if o.SkipNameValidation {
			opts.SkipNameValidation = &o.SkipNameValidation
		}
		return opts
	}
	if err := (&sshhost.Reconciler{Client: mgr.GetClient(), Dialer: o.Dialer, WatchFilterValue: o.WatchFilterValue, ProbeInterval: o.ProbeInterval}).
		SetupWithManager(ctx, mgr, copts(o.HostConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHHost reconciler: %w", err)
	}
	if err := (&sshmachine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Dialer: o.Dialer, WatchFilterValue: o.WatchFilterValue,
		PollInterval: o.PollInterval, RetryInterval: o.RetryInterval, CleanupRetries: o.CleanupRetries}).
		SetupWithManager(ctx, mgr, copts(o.MachineConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHMachine reconciler: %w", err)
	}
	if err := (&sshcluster.Reconciler{Client: mgr.GetClient(), WatchFilterValue: o.WatchFilterValue}).
		SetupWithManager(ctx, mgr, copts(o.ClusterConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHCluster reconciler: %w", err)
	}
	return nil
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error {
	if err := admission.SetupWebhooks(mgr); err != nil {
		return fmt.Errorf("failed to set up webhooks: %w", err)
	}
	return nil
}
