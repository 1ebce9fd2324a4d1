package claim

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// patchCounter counts the writes a client sends: main resource and status apart.
type patchCounter struct{ spec, status int }

// patchClient is a fake client holding objs that counts patches. Only for this small table of reserve's
// one locked patch; PatchObject's behaviour against the API server is tested with the real one
// (infrastructure-ssh/reconcilers/sshmachine, patchobject_test.go).
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

// A machine's finalizer, added in memory by the pass that reserves its first host, goes out in the
// reservation itself (one write, under the machine's resourceVersion), so no claim can reach a host while
// the machine could still be deleted without releasing it. A stale reservation writes nothing: neither
// the reservation nor the finalizer.
func TestReservationCarriesThePendingFinalizer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	keys := Keys{Host: "host", ReservedHost: "reserved", ClaimID: "claim-id"}
	seed := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "uid-1"}}
	n := &patchCounter{}
	c := patchClient(g, n, seed)

	stale := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), stale)).To(Succeed())
	m := stale.DeepCopy()
	controllerutil.AddFinalizer(m, "f")
	written, err := reserve(ctx, c, "Machine", m, keys, "h-1", "f")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.spec).To(Equal(1), "one write")
	got := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Finalizers).To(ConsistOf("f"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("reserved", "h-1"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("claim-id", "uid-1"))
	g.Expect(written.GetResourceVersion()).To(Equal(got.ResourceVersion))

	// Another pass that read the machine before that write loses: nothing of it lands.
	other := stale.DeepCopy()
	controllerutil.AddFinalizer(other, "g")
	_, err = reserve(ctx, c, "Machine", other, keys, "h-2", "g")
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Finalizers).To(ConsistOf("f"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("reserved", "h-1"))
}
