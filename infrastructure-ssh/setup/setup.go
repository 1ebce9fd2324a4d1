// Package setup wires the SSH provider's webhooks and reconcilers into a manager; main.go and the envtest
// suites share it, so tests run exactly what ships.
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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshcluster"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshhost"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
	"github.com/yonder-dev/yonder/infrastructure-ssh/webhooks/admission"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// The manager authenticates and authorizes every metrics scrape (pkg/manager) through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-ssh-manager"

// Scheme returns the scheme the provider uses.
func Scheme() (*runtime.Scheme, error) {
	return manager.Scheme(clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme)
}

// Options configure the reconcilers.
type Options struct {
	manager.Controllers
	// Concurrency per controller.
	MachineConcurrency, HostConcurrency, ClusterConcurrency int
	// ProbeInterval: how often hosts are probed (default 5m).
	ProbeInterval time.Duration
	// PollInterval: the longest wait between checks of a running bootstrap (default 10s; sshmachine.PollDelay).
	PollInterval time.Duration
	// RetryInterval: first wait after an SSH failure (default 15s).
	RetryInterval time.Duration
	// CleanupRetries: cleanup attempts on delete before the operator must act (default 5).
	CleanupRetries int32
	// Dialer: how hosts are reached (default the real SSH dialer).
	Dialer sshexec.Dialer
	// Client overrides the manager's client for the machine reconciler (tests wrap it to stop the
	// provider at a chosen write).
	Client client.Client
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error { return webhooks.Setup(mgr, admission.Webhooks()...) }

// SetupReconcilers registers the provider's reconcilers with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Dialer == nil {
		o.Dialer = sshexec.SSHDialer{}
	}
	if o.Name == "" {
		o.Name = ControllerName
	}
	c := o.Client
	if c == nil {
		c = mgr.GetClient()
	}
	if err := (&sshhost.Reconciler{Client: mgr.GetClient(), Dialer: o.Dialer, WatchFilterValue: o.WatchFilterValue, ProbeInterval: o.ProbeInterval}).
		SetupWithManager(ctx, mgr, o.Options(o.HostConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHHost reconciler: %w", err)
	}
	credentials, err := credentialsCache(mgr, o.WatchNamespace)
	if err != nil {
		return err
	}
	machines := sshmachine.New(c, mgr.GetAPIReader(), o.WatchFilterValue, &sshmachine.Adapter{Name: o.Name, Dialer: o.Dialer, SecretCache: mgr.GetCache(), CredentialsCache: credentials,
		PollInterval: o.PollInterval, RetryInterval: o.RetryInterval, CleanupRetries: o.CleanupRetries})
	if err := machines.SetupWithManager(ctx, mgr, o.Options(o.MachineConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHMachine reconciler: %w", err)
	}
	if err := sshcluster.New(mgr.GetClient(), o.WatchFilterValue).SetupWithManager(ctx, mgr, o.Options(o.ClusterConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderSSHCluster reconciler: %w", err)
	}
	return nil
}

// credentialsCache watches the Secrets labelled infrav1.CredentialsLabel (the host controller labels
// the ones hosts name), and no other Secret: the machine controller reads SSH credentials from it
// instead of from the API server at every connection. The manager's own cache holds only Secrets that
// carry a cluster name (pkg/managercache), and a cache has one label selector per kind, hence a cache of
// its own; the manager starts it with the other caches.
func credentialsCache(mgr ctrl.Manager, namespace string) (cache.Cache, error) {
	req, err := labels.NewRequirement(infrav1.CredentialsLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to select credentials Secrets: %w", err)
	}
	o := cache.Options{HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)}}}
	if namespace != "" {
		o.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(mgr.GetConfig(), o)
	if err != nil {
		return nil, fmt.Errorf("failed to create the credentials Secret cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("failed to add the credentials Secret cache: %w", err)
	}
	return c, nil
}

// Reconcilers returns SetupReconcilers bound to o, for manager.Setup.
func Reconcilers(o Options) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error { return SetupReconcilers(ctx, mgr, o) }
}
