package claims_test

import (
	"context"
	"fmt"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/bmhsim"
	"github.com/yonder-dev/yonder/test/harness"
)

// metalProvider is the bare-metal provider on BareMetalHosts that the host controller simulator
// advances.
type metalProvider struct{}

func (*metalProvider) name() string { return "metal" }

// start implements provider. The bare-metal provider polls nothing: slow changes nothing.
func (*metalProvider) start(t *testing.T, o startOptions) *harness.Provider {
	t.Helper()
	so := setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}}
	return harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		if o.client != nil {
			so.Client = o.client(mgr.GetClient())
		}
		return setup.SetupReconcilers(ctx, mgr, so)
	})
}

func (*metalProvider) cluster(t *testing.T, g Gomega, ns, name string) *clusterv1.Cluster {
	t.Helper()
	return harness.AttachedCluster(t, g, env.Client, wl.Get(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderMetalCluster{Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: harness.Endpoint(wl.Get(t))}}})
}

func metalSpec(pool string) infrav1.YonderMetalMachineSpec {
	return infrav1.YonderMetalMachineSpec{AutomatedCleaningMode: "metadata", HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": pool}},
		Image: &infrav1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123456789abcdef0123456789abcdef", ChecksumType: "md5", Format: "qcow2"}}
}

func (*metalProvider) machineTemplate(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference {
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: metalSpec(pool)}}}
	g.Expect(env.Create(context.Background(), tmpl)).To(Succeed())
	return clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: name}
}

func (*metalProvider) machine(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference {
	m := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: metalSpec(pool)}
	g.Expect(env.Create(context.Background(), m)).To(Succeed())
	return clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachine", Name: name}
}

// metalKeys are the annotations the provider's machines keep their claim in.
var metalKeys = claim.Keys{Host: infrav1.HostAnnotation, ReservedHost: infrav1.ReservedHostAnnotation, ClaimID: infrav1.ClaimIDAnnotation}

func (*metalProvider) machines(g Gomega, ns string) []machineView {
	l := &infrav1.YonderMetalMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	out := make([]machineView, 0, len(l.Items))
	for _, m := range l.Items {
		out = append(out, viewOf(&m, metalKeys, m.Spec.ProviderID, m.Status.HostRef, m.Status.Initialization.Provisioned, m.Status.Conditions))
	}
	return out
}

func (*metalProvider) hosts(g Gomega, ns string) []hostView {
	l := &metal3v1.BareMetalHostList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	out := make([]hostView, 0, len(l.Items))
	for _, h := range l.Items {
		v := hostView{Name: h.Name, Annotations: h.Annotations}
		if r := h.Spec.ConsumerRef; r != nil && r.Kind == "YonderMetalMachine" {
			v.ConsumerName, v.ConsumerID = r.Name, string(r.UID)
		}
		out = append(out, v)
	}
	return out
}

func (*metalProvider) newMachineObject() client.Object { return &infrav1.YonderMetalMachine{} }

func (*metalProvider) recreate(g Gomega, ns, name string) {
	recreate(g, &infrav1.YonderMetalMachine{}, ns, name, func(old client.Object) client.Object {
		m := old.(*infrav1.YonderMetalMachine) //nolint:forcetypeassert // read as one
		return &infrav1.YonderMetalMachine{ObjectMeta: movedMeta(m.ObjectMeta), Spec: m.Spec}
	})
}

// step implements provider: claim (consumer, nothing handed over yet), hand-off (image), withdrawal
// (claimed, image and data gone, host not yet available again), release (no consumer).
func (*metalProvider) step(obj client.Object) string {
	h, ok := obj.(*metal3v1.BareMetalHost)
	switch {
	case !ok:
		return ""
	case h.Spec.ConsumerRef == nil:
		return "release"
	case h.Spec.Image != nil:
		return "handoff"
	case h.Status.Provisioning.State == metal3v1.StateAvailable && !h.Spec.Online:
		return "claim"
	case h.Spec.UserData == nil:
		return "withdraw"
	}
	return ""
}

func (*metalProvider) steps() []string { return []string{"claim", "handoff", "withdraw", "release"} }

// metalInventory is one test's BareMetalHosts and the simulator that advances them.
type metalInventory struct {
	ns  string
	sim *bmhsim.Simulator
	n   int
}

func (*metalProvider) newInventory(t *testing.T, ns string) inventory {
	t.Helper()
	return &metalInventory{ns: ns, sim: bmhsim.Start(t, env.Client, env.GetAPIReader(), ns)}
}

// add registers n available hosts over two failure domains.
func (m *metalInventory) add(_ *testing.T, g Gomega, prefix, pool string, n int) {
	for i := range n {
		bmhsim.Register(g, env.Client, m.ns, bmhsim.Host{Name: fmt.Sprintf("%s-%d", prefix, i), FailureDomain: fmt.Sprintf("fd%d", (m.n+i)%2),
			Labels: map[string]string{"pool": pool}})
	}
	m.n += n
}

func (m *metalInventory) provisionings(Gomega) map[string]map[string]int {
	return m.sim.Provisionings()
}

func (m *metalInventory) holdProvisioning(hold bool) { m.sim.SetHold(hold) }

// releasedOrphan implements inventory: the release withdrew the image and user data, and the host
// controller deprovisions (cleans) the host back to available by itself.
func (m *metalInventory) releasedOrphan(g Gomega, name, _ string) {
	g.Eventually(func(g Gomega) { m.checkFree(g, name) }).Should(Succeed())
}

func (m *metalInventory) checkFree(g Gomega, name string) {
	h := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: m.ns, Name: name}, h)).To(Succeed())
	g.Expect(h.Spec.ConsumerRef).To(BeNil(), "host %s", name)
	g.Expect(h.Spec.Image).To(BeNil(), "host %s", name)
	g.Expect(h.Spec.UserData).To(BeNil(), "host %s", name)
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable), "host %s", name)
}
