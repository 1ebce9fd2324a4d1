// Package setup wires the bootstrap provider's webhooks and reconcilers into a manager; main.go and the
// envtest suites share it so tests run exactly what ships.
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
	"sigs.k8s.io/cluster-api/controllers/clustercache"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/reconcilers/kubeletserving"
	"github.com/yonder-dev/yonder/bootstrap/reconcilers/yonderconfig"
	"github.com/yonder-dev/yonder/bootstrap/webhooks/admission"
)

// Scheme returns the scheme the manager needs.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Options configures the reconcilers.
type Options struct {
	WatchFilterValue string
	// DefaultAgent is the yonder-agent source used when a YonderConfig sets none.
	DefaultAgent cloudinit.AgentSource
	// ImageRepository is the default image repository (node images, the agent).
	ImageRepository string
	// TokenCheckInterval overrides how often tokens of unjoined Machines are checked (default TTL/3).
	TokenCheckInterval time.Duration
	Concurrency        int
}

// DefaultAgent builds an agent source from the manager's flags.
func DefaultAgent(url, sha256 string) cloudinit.AgentSource {
	return cloudinit.AgentSource{URL: url, SHA256: sha256}
}

// Webhooks registers the admission webhooks.
func Webhooks(mgr ctrl.Manager) error {
	if err := (&admission.YonderConfig{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up YonderConfig webhook: %w", err)
	}
	if err := (&admission.YonderConfigTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up YonderConfigTemplate webhook: %w", err)
	}
	return nil
}

// Reconcilers registers the reconcilers with a ClusterCache for workload cluster access.
func Reconcilers(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache, o Options) error {
	if o.Concurrency == 0 {
		o.Concurrency = 10
	}
	opts := controller.Options{MaxConcurrentReconciles: o.Concurrency}
	if err := (&yonderconfig.Reconciler{
		Client: mgr.GetClient(), ClusterCache: cc, WatchFilterValue: o.WatchFilterValue,
		DefaultAgent: o.DefaultAgent, ImageRepository: o.ImageRepository, TokenCheckInterval: o.TokenCheckInterval,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return err
	}
	return (&kubeletserving.Reconciler{Client: mgr.GetClient(), ClusterCache: cc, WatchFilterValue: o.WatchFilterValue}).
		SetupWithManager(ctx, mgr, opts)
}
