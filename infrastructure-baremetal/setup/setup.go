// Package setup holds what main.go and the envtest suites share: the scheme, and the registration of the
// provider's reconcilers and webhooks.
package setup

import (
	"context"
	"fmt"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalcluster"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalmachine"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/webhooks/admission"
)

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-metal-manager"

// Scheme returns the scheme the provider uses: core, CAPI, this provider's kinds and Metal3's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, metal3v1.AddToScheme} {
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
	MachineConcurrency, ClusterConcurrency int
	// SkipNameValidation lets tests register the controllers in several managers of one process.
	SkipNameValidation bool
}

// SetupReconcilers registers the provider's machine and cluster reconcilers with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := (&metalmachine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), WatchFilterValue: o.WatchFilterValue}).
		SetupWithManager(ctx, mgr, o.ControllerOptions(o.MachineConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderMetalMachine reconciler: %w", err)
	}
	if err := (&metalcluster.Reconciler{Client: mgr.GetClient(), WatchFilterValue: o.WatchFilterValue}).
		SetupWithManager(ctx, mgr, o.ControllerOptions(o.ClusterConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderMetalCluster reconciler: %w", err)
	}
	return nil
}

// ControllerOptions returns controller options with n concurrent reconciles (default 10).
func (o Options) ControllerOptions(n int) controller.Options {
	if n <= 0 {
		n = 10
	}
	opts := controller.Options{MaxConcurrentReconciles: n}
	if o.SkipNameValidation {
		opts.SkipNameValidation = &o.SkipNameValidation
	}
	return opts
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error {
	if err := admission.SetupWebhooks(mgr); err != nil {
		return fmt.Errorf("failed to set up webhooks: %w", err)
	}
	return nil
}
