// Package setup wires the control-plane adapter's webhooks and reconcilers into a manager; main.go and
// the envtest suites share it so tests run exactly what ships.
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

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/controlplane/reconcilers/yondercontrolplane"
	"github.com/yonder-dev/yonder/controlplane/webhooks/admission"
)

// Scheme returns the scheme the manager needs.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Options configures the reconcilers.
type Options struct {
	WatchFilterValue    string
	HealthCheckInterval time.Duration
	RetryInterval       time.Duration
	Concurrency         int
}

// Webhooks registers the admission webhooks.
func Webhooks(mgr ctrl.Manager) error {
	if err := (&admission.YonderControlPlane{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up YonderControlPlane webhook: %w", err)
	}
	if err := (&admission.YonderControlPlaneTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up YonderControlPlaneTemplate webhook: %w", err)
	}
	return nil
}

// Reconcilers registers the reconcilers.
func Reconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Concurrency == 0 {
		o.Concurrency = 10
	}
	return (&yondercontrolplane.Reconciler{
		Client:              mgr.GetClient(),
		WatchFilterValue:    o.WatchFilterValue,
		HealthCheckInterval: o.HealthCheckInterval,
		RetryInterval:       o.RetryInterval,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.Concurrency})
}
