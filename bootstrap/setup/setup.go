// Package setup wires the bootstrap provider's webhooks and reconcilers into a manager; main.go and the
// envtest suites share it, so tests run exactly what ships.
package setup

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/reconcilers/kubeletserving"
	"github.com/yonder-dev/yonder/bootstrap/reconcilers/yonderconfig"
	"github.com/yonder-dev/yonder/bootstrap/webhooks/admission"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// The manager authenticates and authorizes every metrics scrape (pkg/manager) through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-bootstrap-manager"

// Scheme returns the scheme the manager needs.
func Scheme() (*runtime.Scheme, error) {
	return manager.Scheme(clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme)
}

// Options configure the reconcilers.
type Options struct {
	manager.Controllers
	// DefaultAgent is the yonder-agent source used when a YonderConfig sets none.
	DefaultAgent cloudinit.AgentSource
	// ImageRepository is the default image repository (node images, the agent).
	ImageRepository string
	// TokenCheckInterval overrides how often tokens of unjoined Machines are checked (default TTL/3).
	TokenCheckInterval time.Duration
	// Concurrency of the reconcilers (and of the ClusterCache).
	Concurrency int
	// ClusterCache reaches the workload clusters; nil creates one with the manager.
	ClusterCache clustercache.ClusterCache
}

// DefaultAgent builds an agent source from the manager's flags.
func DefaultAgent(url, sha256 string) cloudinit.AgentSource {
	return cloudinit.AgentSource{URL: url, SHA256: sha256}
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error { return webhooks.Setup(mgr, admission.Webhooks()...) }

// SetupReconcilers registers the reconcilers (and, unless given one, a ClusterCache for workload
// cluster access) with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Name == "" {
		o.Name = ControllerName
	}
	cc := o.ClusterCache
	if cc == nil {
		var err error
		cc, err = clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
			SecretClient:     mgr.GetClient(),
			Cache:            clustercache.CacheOptions{},
			Client:           clustercache.ClientOptions{UserAgent: o.Name, QPS: 20, Burst: 30},
			WatchFilterValue: o.WatchFilterValue,
		}, o.Options(o.Concurrency))
		if err != nil {
			return fmt.Errorf("failed to create the ClusterCache: %w", err)
		}
	}
	if err := (&yonderconfig.Reconciler{
		Client: mgr.GetClient(), ClusterCache: cc, WatchFilterValue: o.WatchFilterValue,
		DefaultAgent: o.DefaultAgent, ImageRepository: o.ImageRepository, TokenCheckInterval: o.TokenCheckInterval,
	}).SetupWithManager(ctx, mgr, o.Options(o.Concurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderConfig reconciler: %w", err)
	}
	if err := (&kubeletserving.Reconciler{Client: mgr.GetClient(), ClusterCache: cc, WatchFilterValue: o.WatchFilterValue}).
		SetupWithManager(ctx, mgr, o.Options(o.Concurrency)); err != nil {
		return fmt.Errorf("failed to set up the kubelet-serving CSR reconciler: %w", err)
	}
	return nil
}

// Reconcilers returns SetupReconcilers bound to o, for manager.Setup.
func Reconcilers(o Options) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error { return SetupReconcilers(ctx, mgr, o) }
}
