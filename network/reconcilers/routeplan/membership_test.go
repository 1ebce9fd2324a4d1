package routeplan_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/reconcilers/routeplan"
	"github.com/yonder-dev/yonder/network/setup"
)

// A node that labels itself into another Site (a kubelet may change its own Node's labels, the
// controller's network.yonder.dev/site among them) does not join that Site's plan: membership comes from
// the Sites, and a Node whose label disagrees with them is left out until the label is repaired. Only the
// route plan reconciler runs here, so no node reconciler puts the label back first.
func TestNodeRelabellingItselfDoesNotChangeItsSite(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	n := getNode(ctx, g, "a1")
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[netv1.SiteLabel] = "b"
	g.Expect(env.Patch(ctx, n, patch)).To(Succeed())
	startRoutePlanOnly(t)

	peers := func(slice string) func(g Gomega) []string {
		return func(g Gomega) []string {
			s := &netv1.PeerSlice{}
			g.Expect(env.Get(ctx, client.ObjectKey{Name: slice}, s)).To(Succeed())
			var names []string
			for _, p := range s.Spec.Peers {
				names = append(names, p.Node)
			}
			return names
		}
	}
	// The other Nodes carry no label yet (no node reconciler runs): label them as it would.
	for name, site := range map[string]string{"a2": "a", "b1": "b"} {
		n := getNode(ctx, g, name)
		patch := client.MergeFrom(n.DeepCopy())
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[netv1.SiteLabel] = site
		g.Expect(env.Patch(ctx, n, patch)).To(Succeed())
	}
	g.Eventually(peers("a-nodes-0")).Should(ConsistOf("a2"))
	g.Eventually(peers("b-nodes-0")).Should(ConsistOf("b1"))
	g.Consistently(peers("b-nodes-0"), "2s").Should(ConsistOf("b1"))
	g.Expect(getNode(ctx, g, "a1").Labels).To(HaveKeyWithValue(netv1.SiteLabel, "b"), "nobody repaired the forged label: the plan ignored it")
}

func getNode(ctx context.Context, g Gomega, name string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

// startRoutePlanOnly runs a manager with the route plan reconciler alone until the test ends.
func startRoutePlanOnly(t *testing.T) {
	t.Helper()
	scheme, err := setup.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&routeplan.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, controller.Options{SkipNameValidation: &skip}); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
}
