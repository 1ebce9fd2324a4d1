package sshmachine_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshtest"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
	"github.com/yonder-dev/yonder/test/labnet"
)

// clusterctl move recreates a YonderSSHMachine with a new UID and no status. The moved object still holds
// its host (the claim-id annotation matches the host's consumerRef) and finds the run record on the
// host: it is provisioned again without a second bootstrap, and deleting it releases the host.
func TestMovedMachineKeepsItsClaimAndRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "move").Name
	n := labnet.NewForTest(t)
	keyPEM, _, err := sshtest.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := sshtest.Start(ctx, n, "mv", 1, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	registerHosts(g, ns, hs, keyPEM, nil, []string{"rm -f /var/lib/yonder-ssh/joined"})
	p := startProvider(t, testOptions())
	cluster := newCluster(t, g, ns, "move")
	data := dataSecret(g, ns, "mv-join", cluster.Name,
		"#cloud-config\nruncmd:\n- echo joined >> /var/lib/yonder-ssh/joined\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n")
	newMachine(g, ns, cluster.Name, "mv", "mv-0", data.Name)

	key := client.ObjectKey{Namespace: ns, Name: "mv"}
	before := &infrav1.YonderSSHMachine{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.GetAPIReader().Get(ctx, key, before)).To(Succeed())
		g.Expect(ptr.Deref(before.Status.Initialization.Provisioned, false)).To(BeTrue())
		g.Expect(before.Annotations).To(HaveKeyWithValue(sshmachine.ClaimIDAnnotation, string(before.UID)))
		g.Expect(before.Annotations).NotTo(HaveKey(sshmachine.BlockMoveAnnotation))
	}, "2m").Should(Succeed())

	// The move: the controller stops, the object is deleted without its finalizer running and created
	// again from its metadata and spec (new UID, no status), as clusterctl does.
	p.stop()
	moved := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: before.Name, Labels: before.Labels,
		Annotations: before.Annotations, OwnerReferences: before.OwnerReferences, Finalizers: before.Finalizers}, Spec: before.Spec}
	cur := before.DeepCopy()
	cur.Finalizers = nil
	g.Expect(env.Update(ctx, cur)).To(Succeed())
	g.Expect(env.Delete(ctx, cur)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.GetAPIReader().Get(ctx, key, &infrav1.YonderSSHMachine{}))
	}).Should(BeTrue())
	g.Expect(env.Create(ctx, moved)).To(Succeed())
	g.Expect(moved.UID).NotTo(Equal(before.UID))
	startProvider(t, testOptions())

	g.Eventually(func(g Gomega) {
		got := &infrav1.YonderSSHMachine{}
		g.Expect(env.GetAPIReader().Get(ctx, key, got)).To(Succeed())
		g.Expect(ptr.Deref(got.Status.Initialization.Provisioned, false)).To(BeTrue())
		g.Expect(got.Spec.ProviderID).To(Equal(before.Spec.ProviderID))
		g.Expect(got.Status.HostRef).To(Equal("mv-0"))
	}, "2m").Should(Succeed())
	h := &infrav1.YonderSSHHost{}
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "mv-0"}, h)).To(Succeed())
	g.Expect(h.Spec.ConsumerRef).NotTo(BeNil())
	g.Expect(h.Spec.ConsumerRef.UID).To(Equal(string(before.UID)), "the claim is kept, not made again")
	out, err := hs[0].Output(ctx, "ls /var/lib/yonder-ssh/runs; echo --; cat /var/lib/yonder-ssh/joined")
	g.Expect(err).NotTo(HaveOccurred())
	runs, joined, _ := strings.Cut(out, "--\n")
	g.Expect(strings.Fields(runs)).To(ConsistOf(string(before.UID)))
	g.Expect(joined).To(Equal("joined\n"), "the moved Machine did not bootstrap the host again")

	// Deleting the moved Machine releases the host it kept.
	g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mv"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "mv-0"}, h)).To(Succeed())
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
	}, "2m").Should(Succeed())
}
