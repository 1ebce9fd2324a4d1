// Package setup wires the control-plane adapter's webhooks and reconcilers into a manager; main.go and
// the envtest suites share it so tests run exactly what ships.
package setup

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// CacheOptions caches only Secrets that carry a cluster name (the source kubeconfigs the reconciler
// labels and "<cluster>-kubeconfig"), never every Secret of the management cluster.
func CacheOptions(watchNamespace string, syncPeriod time.Duration) ctrlcache.Options {
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	o := ctrlcache.Options{
		SyncPeriod: &syncPeriod,
		ByObject:   map[client.Object]ctrlcache.ByObject{&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)}},
	}
	if watchNamespace != "" {
		o.DefaultNamespaces = map[string]ctrlcache.Config{watchNamespace: {}}
	}
	return o
}

// ClientOptions reads Secrets live, so an unlabelled Secret is still found.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
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
