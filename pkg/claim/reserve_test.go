package claim

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/test/envtest"
)

// env is a real apiserver with CAPI's CRDs: reserve's optimistic lock and what its one patch writes are the
// apiserver's behaviour, not a fake's.
var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{WithoutCAPIControllers: true}, func(e *envtest.Environment) { env = e }))
}

// writeCounter is a client of the test apiserver that counts its writes: main resource and status apart.
type writeCounter struct{ spec, status atomic.Int64 }

func countingWriter(g *WithT, n *writeCounter) client.Client {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			n.spec.Add(1)
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			n.status.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
}

// A machine's finalizer, added in memory by the pass that reserves its first host, goes out in the
// reservation itself (one write, under the machine's resourceVersion), so no claim can reach a host while
// the machine could still be deleted without releasing it. A stale reservation writes nothing: neither
// the reservation nor the finalizer.
func TestReservationCarriesThePendingFinalizer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	keys := Keys{Host: "host", ReservedHost: "reserved", ClaimID: "claim-id"}
	ns := env.CreateNamespace(ctx, t, "reserve").Name
	seed := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}, Spec: clusterv1.MachineSpec{
		ClusterName: "c", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("c-bootstrap")},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "YonderSSHMachine", Name: "m"},
	}}
	g.Expect(env.Create(ctx, seed)).To(Succeed())
	n := &writeCounter{}
	c := countingWriter(g, n)

	stale := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), stale)).To(Succeed())
	m := stale.DeepCopy()
	controllerutil.AddFinalizer(m, "test.yonder.dev/f")
	written, err := reserve(ctx, c, "Machine", m, keys, "h-1", "test.yonder.dev/f")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.spec.Load()).To(BeEquivalentTo(1), "one write")
	g.Expect(n.status.Load()).To(BeZero())
	got := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Finalizers).To(ConsistOf("test.yonder.dev/f"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("reserved", "h-1"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("claim-id", string(seed.UID)))
	g.Expect(written.GetResourceVersion()).To(Equal(got.ResourceVersion))

	// Another pass that read the machine before that write loses: nothing of it lands.
	other := stale.DeepCopy()
	controllerutil.AddFinalizer(other, "test.yonder.dev/g")
	_, err = reserve(ctx, c, "Machine", other, keys, "h-2", "test.yonder.dev/g")
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(seed), got)).To(Succeed())
	g.Expect(got.Finalizers).To(ConsistOf("test.yonder.dev/f"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("reserved", "h-1"))
}
