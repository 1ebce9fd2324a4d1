// Package setup wires the network controller's reconcilers and webhooks into a manager. main.go and the
// envtest suites use the same functions, so tests run what production runs.
package setup

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/reconcilers/node"
	"github.com/yonder-dev/yonder/network/reconcilers/routeplan"
	"github.com/yonder-dev/yonder/network/webhooks/admission"
)

// Options configure the reconcilers.
type Options struct {
	// SliceSize is the maximum number of peers per PeerSlice.
	SliceSize int
	// NodeConcurrency is the number of Node workers.
	NodeConcurrency int
	// Client overrides the manager's client (tests wrap it to count writes).
	Client client.Client
	// SkipNameValidation lets tests start several managers in one process.
	SkipNameValidation bool
}

// Reconcilers are the running reconcilers (tests and the benchmark read their counters).
type Reconcilers struct {
	Node      *node.Reconciler
	RoutePlan *routeplan.Reconciler
}

// Scheme returns a scheme with the kinds the controller uses.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, netv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build scheme: %w", err)
		}
	}
	return s, nil
}

// SetupReconcilers registers the reconcilers with the manager.
func SetupReconcilers(ctx context.Context, mgr ctrl.Manager, opts Options) (*Reconcilers, error) {
	c := opts.Client
	if c == nil {
		c = mgr.GetClient()
	}
	c = client.WithFieldOwner(c, netv1.ControllerName)
	skip := opts.SkipNameValidation
	nodeOpts := controller.Options{MaxConcurrentReconciles: max(opts.NodeConcurrency, 1), SkipNameValidation: &skip}
	rs := &Reconcilers{Node: &node.Reconciler{Client: c}, RoutePlan: &routeplan.Reconciler{Client: c, SliceSize: opts.SliceSize}}
	if err := rs.Node.SetupWithManager(ctx, mgr, nodeOpts); err != nil {
		return nil, err
	}
	if err := rs.RoutePlan.SetupWithManager(ctx, mgr, controller.Options{SkipNameValidation: &skip}); err != nil {
		return nil, err
	}
	return rs, nil
}

// SetupWebhooks registers the validating webhooks with the manager.
func SetupWebhooks(mgr ctrl.Manager) error {
	return admission.Setup(mgr)
}
