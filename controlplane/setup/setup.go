// Package setup wires the control-plane adapter's webhooks and reconcilers into a manager; main.go and
// the envtest suites share it, so tests run exactly what ships.
package setup

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/controlplane/reconcilers/yondercontrolplane"
	"github.com/yonder-dev/yonder/controlplane/webhooks/admission"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// The manager authenticates and authorizes every metrics scrape (pkg/manager) through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-controlplane-manager"

// Scheme returns the scheme the manager needs.
func Scheme() (*runtime.Scheme, error) {
	return manager.Scheme(clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme)
}

// Options configure the reconcilers.
type Options struct {
	manager.Controllers
	HealthCheckInterval time.Duration
	RetryInterval       time.Duration
	Concurrency         int
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error { return webhooks.Setup(mgr, admission.Webhooks()...) }

// SetupReconcilers registers the reconcilers with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := (&yondercontrolplane.Reconciler{
		Client:              mgr.GetClient(),
		WatchFilterValue:    o.WatchFilterValue,
		HealthCheckInterval: o.HealthCheckInterval,
		RetryInterval:       o.RetryInterval,
		Recorder:            mgr.GetEventRecorderFor(ControllerName), //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}).SetupWithManager(ctx, mgr, o.Options(o.Concurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderControlPlane reconciler: %w", err)
	}
	return nil
}

// Reconcilers returns SetupReconcilers bound to o, for manager.Setup.
func Reconcilers(o Options) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error { return SetupReconcilers(ctx, mgr, o) }
}
