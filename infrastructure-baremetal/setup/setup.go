// Package setup wires the bare-metal provider's webhooks and reconcilers into a manager; main.go and the
// envtest suites share it, so tests run exactly what ships.
package setup

import (
	"context"
	"fmt"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalcluster"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalmachine"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalremediation"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/webhooks/admission"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// The manager authenticates and authorizes every metrics scrape (pkg/manager) through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ControllerName is the manager's name (field owner, user agent, leader election id prefix).
const ControllerName = "yonder-metal-manager"

// Scheme returns the scheme the provider uses: core, CAPI, this provider's kinds and Metal3's.
func Scheme() (*runtime.Scheme, error) {
	return manager.Scheme(clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, metal3v1.AddToScheme)
}

// Options configure the reconcilers.
type Options struct {
	manager.Controllers
	// Concurrency per controller.
	MachineConcurrency, ClusterConcurrency int
	// Hosts configures Yonder's own BareMetalHost controller and boot services; nil leaves them out
	// (another host controller, such as Metal3's, or a test's simulator, reconciles the hosts).
	Hosts *baremetalhost.Options
	// Client overrides the manager's client for the machine reconciler (tests wrap it to stop the
	// provider at a chosen write).
	Client client.Client
	// RemediationHealthCheckRecordWait bounds how long a new YonderMetalRemediation waits for the
	// MachineHealthCheck's record on its Machine before writing to it (0: 10 s; tests lengthen it).
	RemediationHealthCheckRecordWait time.Duration
}

// SetupWebhooks registers the provider's admission webhooks with mgr.
func SetupWebhooks(mgr ctrl.Manager) error { return webhooks.Setup(mgr, admission.Webhooks()...) }

// SetupReconcilers registers the provider's reconcilers with mgr.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Name == "" {
		o.Name = ControllerName
	}
	c := o.Client
	if c == nil {
		c = mgr.GetClient()
	}
	machines := metalmachine.New(c, mgr.GetAPIReader(), o.WatchFilterValue, &metalmachine.Adapter{Name: o.Name})
	if err := machines.SetupWithManager(ctx, mgr, o.Options(o.MachineConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderMetalMachine reconciler: %w", err)
	}
	if err := metalcluster.New(mgr.GetClient(), o.WatchFilterValue).SetupWithManager(ctx, mgr, o.Options(o.ClusterConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderMetalCluster reconciler: %w", err)
	}
	// Remediations are few and short-lived; they share the machines' concurrency.
	remediations := &metalremediation.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), WatchFilterValue: o.WatchFilterValue, Name: o.Name,
		HealthCheckRecordWait: o.RemediationHealthCheckRecordWait}
	if err := remediations.SetupWithManager(ctx, mgr, o.Options(o.MachineConcurrency)); err != nil {
		return fmt.Errorf("failed to set up the YonderMetalRemediation reconciler: %w", err)
	}
	if o.Hosts != nil {
		// BareMetalHosts labelled metal.yonder.dev/managed=true, and the boot services when configured.
		if err := baremetalhost.SetupWithManager(ctx, mgr, *o.Hosts); err != nil {
			return fmt.Errorf("failed to set up the BareMetalHost reconciler: %w", err)
		}
	}
	return nil
}

// Reconcilers returns SetupReconcilers bound to o, for manager.Setup.
func Reconcilers(o Options) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error { return SetupReconcilers(ctx, mgr, o) }
}
