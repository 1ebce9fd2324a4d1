package metalmachine_test

import (
	"context"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalmachine"
)

// Deleting a whole Cluster: CAPI skips Node deletion (it assumes the workload cluster goes away with the
// Cluster), but Yonder's workload cluster is attached and stays. Once the host is deprovisioned the
// provider deletes the Node carrying the host's providerID, so the host's next Machine does not find its
// providerID taken by a stale Node. A Node of another host, with another providerID, stays.
func TestClusterDeletionRemovesTheReleasedHostsNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "stale").Name
	pool := map[string]string{"pool": "stale"}
	registerHosts(g, ns, hostSpec{Name: "s1", Labels: pool})
	simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "stale")
	startProvider(t, testOptions())
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "stale-join", cluster.Name)
	newMachineDeployment(g, ns, "stale", cluster, data.Name, 1, pool)

	// A bystander Node of a host in another namespace: same workload cluster, different providerID.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-bystander"}, Spec: corev1.NodeSpec{ProviderID: metalmachine.ProviderID(ns+"-other", "s1")}}
	g.Expect(wlc.Create(ctx, other)).To(Succeed())
	t.Cleanup(func() { _ = wlc.Delete(context.Background(), other) })

	var node string
	g.Eventually(func(g Gomega) {
		ensureNodes(g, wlc, ns)
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		g.Expect(list.Items[0].Status.NodeRef.IsDefined()).To(BeTrue())
		node = list.Items[0].Status.NodeRef.Name
	}).Should(Succeed())
	n := &corev1.Node{}
	g.Expect(wlc.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	g.Expect(n.Spec.ProviderID).To(Equal(metalmachine.ProviderID(ns, "s1")))

	g.Expect(env.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Get(ctx, client.ObjectKeyFromObject(cluster), &clusterv1.Cluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Cluster still there: %v", err)
	}, 2*time.Minute).Should(Succeed())
	h := host(g, ns, "s1")
	g.Expect(h.Spec.ConsumerRef).To(BeNil())
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	err = wlc.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the released host's Node %s outlived its Cluster: %v", node, err)
	g.Expect(wlc.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Node{})).To(Succeed(), "a Node of another host was deleted")
}
