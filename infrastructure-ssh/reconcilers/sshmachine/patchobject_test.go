package sshmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// countingClient is a client of the test apiserver whose requests are counted by kind ("PATCH res/sub").
func countingClient(g *WithT) (client.Client, *requestKinds) {
	kinds := &requestKinds{n: map[string]int64{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = kinds.wrap
	c, err := client.New(cfg, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return c, kinds
}

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()}
}

// claim.PatchObject against the real apiserver sends status and conditions in one request when nobody else
// wrote the object since it was read. When someone did (another replica, a person), the request locked on
// the version read is refused and the write falls back to CAPI's patch helper: the other writer's
// conditions and status stay, this pass's changes land.
func TestPatchObjectFoldsConditionsAndNeverClobbersAnotherWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// other is written by someone else after base was read; nil for none.
		other func(*infrav1.YonderSSHMachine)
	}{
		{name: "alone: one status request"},
		{name: "raced: the other's condition and status stay", other: func(m *infrav1.YonderSSHMachine) {
			conditions.Set(m, cond("Other", metav1.ConditionTrue, "Set"))
			m.Status.HostRef = "elsewhere"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := env.CreateNamespace(ctx, t, "patchobject").Name
			c, kinds := countingClient(g)
			seed := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
			g.Expect(c.Create(ctx, seed)).To(Succeed())
			seed.Status.Conditions = []metav1.Condition{cond("Mine", metav1.ConditionFalse, "Waiting")}
			g.Expect(c.Status().Update(ctx, seed)).To(Succeed())
			base := &infrav1.YonderSSHMachine{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), base)).To(Succeed())
			if tc.other != nil {
				cur := base.DeepCopy()
				tc.other(cur)
				g.Expect(c.Status().Update(ctx, cur)).To(Succeed())
			}
			m := base.DeepCopy()
			conditions.Set(m, cond("Mine", metav1.ConditionTrue, "Done"))
			m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.9"}}
			kinds.reset()
			g.Expect(claim.PatchObject(ctx, c, base, m, []string{"Mine"})).To(Succeed())
			n := kinds.snapshot()
			g.Expect(n).NotTo(HaveKey("PATCH yondersshmachines"), "no spec or metadata change, no such request")
			if tc.other == nil {
				g.Expect(n).To(HaveKeyWithValue("PATCH yondersshmachines/status", int64(1)), "status with its conditions in one request: %v", n)
			} else {
				g.Expect(n).To(HaveKeyWithValue("PATCH yondersshmachines/status", BeNumerically(">=", 2)), "the locked request refused, then the helper's: %v", n)
			}

			got := &infrav1.YonderSSHMachine{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
			g.Expect(conditions.Get(got, "Mine").Reason).To(Equal("Done"))
			g.Expect(got.Status.Addresses).To(HaveLen(1))
			if tc.other != nil {
				g.Expect(conditions.Get(got, "Other")).NotTo(BeNil(), "another writer's condition is kept")
				g.Expect(got.Status.HostRef).To(Equal("elsewhere"), "status this pass did not change is kept")
			} else {
				g.Expect(m.ResourceVersion).To(Equal(got.ResourceVersion), "m carries the version written")
			}
		})
	}
}

// A spec write goes first, as CAPI's patch helper sends it (spec.providerID before status says
// provisioned); the status request then locks on the version the spec write returned.
func TestPatchObjectWritesSpecThenStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "patchobject").Name
	c, kinds := countingClient(g)
	seed := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
	g.Expect(c.Create(ctx, seed)).To(Succeed())
	base := &infrav1.YonderSSHMachine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), base)).To(Succeed())
	m := base.DeepCopy()
	m.Spec.ProviderID = "yonder-ssh://" + ns + "/h"
	m.Finalizers = []string{infrav1.MachineFinalizer}
	conditions.Set(m, cond("Mine", metav1.ConditionTrue, "Done"))
	kinds.reset()
	g.Expect(claim.PatchObject(ctx, c, base, m, []string{"Mine"})).To(Succeed())
	g.Expect(kinds.snapshot()).To(Equal(map[string]int64{"PATCH yondersshmachines": 1, "PATCH yondersshmachines/status": 1}))
	got := &infrav1.YonderSSHMachine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Spec.ProviderID).To(Equal(m.Spec.ProviderID))
	g.Expect(got.Finalizers).To(ConsistOf(infrav1.MachineFinalizer))
	g.Expect(conditions.Get(got, "Mine")).NotTo(BeNil())
	g.Expect(m.ResourceVersion).To(Equal(got.ResourceVersion))
	// Remove the finalizer so the namespace can go.
	got.Finalizers = nil
	g.Expect(c.Update(ctx, got)).To(Succeed())
}
