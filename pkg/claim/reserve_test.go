package claim

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

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
