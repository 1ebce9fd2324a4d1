package claim

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
)

// patchCounter counts the writes PatchObject sends: main resource and status apart.
type patchCounter struct{ spec, status int }

func patchClient(g *WithT, n *patchCounter, objs ...client.Object) client.Client {
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				n.spec++
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				n.status++
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
}

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()}
}

// PatchObject sends status and conditions in one request when nobody else wrote the object since it was
// read; when someone did (another replica, a person), the locked request is refused and the write falls
// back to CAPI's patch helper: the other writer's conditions and status stay, this pass's changes land.
func TestPatchObjectFoldsConditionsAndNeverClobbersAnotherWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// other is written by someone else after base was read; nil for none.
		other      func(*clusterv1.Machine)
		wantStatus int
	}{
		{name: "alone: one status request", wantStatus: 1},
		{name: "raced: the other's condition and phase stay", wantStatus: 3, other: func(m *clusterv1.Machine) {
			conditions.Set(m, cond("Other", metav1.ConditionTrue, "Set"))
			m.Status.Phase = "Elsewhere"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			seed := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
				Status: clusterv1.MachineStatus{Conditions: []metav1.Condition{cond("Mine", metav1.ConditionFalse, "Waiting")}}}
			n := &patchCounter{}
			c := patchClient(g, n, seed)
			base := &clusterv1.Machine{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), base)).To(Succeed())
			if tc.other != nil {
				cur := &clusterv1.Machine{}
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), cur)).To(Succeed())
				tc.other(cur)
				g.Expect(c.Status().Update(ctx, cur)).To(Succeed())
			}
			m := base.DeepCopy()
			conditions.Set(m, cond("Mine", metav1.ConditionTrue, "Done"))
			m.Status.FailureDomain = "rack-1"
			n.spec, n.status = 0, 0
			g.Expect(PatchObject(ctx, c, base, m, []string{"Mine"})).To(Succeed())
			g.Expect(n.spec).To(Equal(0))
			g.Expect(n.status).To(Equal(tc.wantStatus), "status requests (the conditions' own request and the status request after a refused one)")

			got := &clusterv1.Machine{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
			g.Expect(conditions.Get(got, "Mine").Reason).To(Equal("Done"))
			g.Expect(got.Status.FailureDomain).To(Equal("rack-1"))
			if tc.other != nil {
				g.Expect(conditions.Get(got, "Other")).NotTo(BeNil(), "another writer's condition is kept")
				g.Expect(got.Status.Phase).To(Equal("Elsewhere"), "status this pass did not change is kept")
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
	seed := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
	n := &patchCounter{}
	c := patchClient(g, n, seed)
	base := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), base)).To(Succeed())
	m := base.DeepCopy()
	m.Spec.ProviderID = "yonder://x"
	m.Finalizers = []string{"f"}
	conditions.Set(m, cond("Mine", metav1.ConditionTrue, "Done"))
	g.Expect(PatchObject(ctx, c, base, m, []string{"Mine"})).To(Succeed())
	g.Expect(*n).To(Equal(patchCounter{spec: 1, status: 1}))
	got := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Spec.ProviderID).To(Equal("yonder://x"))
	g.Expect(got.Finalizers).To(ConsistOf("f"))
	g.Expect(conditions.Get(got, "Mine")).NotTo(BeNil())
	g.Expect(m.ResourceVersion).To(Equal(got.ResourceVersion))
}
