package metalmachine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// A MachineHealthCheck finds the Node of a bare-metal Machine NotReady; CAPI deletes the Machine, the
// provider deprovisions and releases its host, and the MachineSet's replacement claims the same host
// (the only one) and is provisioned on it again.
func TestMachineHealthCheckReplacementReusesTheHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "mhc").Name
	pool := map[string]string{"pool": "mhc"}
	registerHosts(g, ns, hostSpec{Name: "only", Labels: pool})
	sim := simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "mhc")
	startProvider(t, testOptions())
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "mhc-join", cluster.Name)
	newMachineDeployment(g, ns, "mhc", cluster, data.Name, 1, pool)

	running := func(g Gomega) *clusterv1.Machine {
		ensureNodes(g, wlc, ns)
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		g.Expect(list.Items[0].Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s: %v", list.Items[0].Name, list.Items[0].Status.Conditions)
		g.Expect(list.Items[0].Status.NodeRef.IsDefined()).To(BeTrue())
		return &list.Items[0]
	}
	var first *clusterv1.Machine
	g.Eventually(func(g Gomega) { first = running(g) }).Should(Succeed())

	g.Expect(env.Create(ctx, &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mhc"},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: cluster.Name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"md": "mhc"}},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](1)},
			}},
		},
	})).To(Succeed())
	node := &corev1.Node{}
	g.Expect(wlc.Get(ctx, client.ObjectKey{Name: first.Status.NodeRef.Name}, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletDown",
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute)), LastHeartbeatTime: metav1.Now()}}
	g.Expect(wlc.Status().Update(ctx, node)).To(Succeed())

	// The unhealthy Machine is replaced; its host went through deprovisioning in between.
	var second *clusterv1.Machine
	g.Eventually(func(g Gomega) {
		h := host(g, ns, "only")
		ymms := metalMachines(g, ns)
		diag := fmt.Sprintf("host: state %s consumer %v online %v; ", h.Status.Provisioning.State, h.Spec.ConsumerRef, h.Spec.Online)
		for _, m := range ymms {
			diag += fmt.Sprintf("ymm %s deleting=%v ann=%v conds=%v; ", m.Name, !m.DeletionTimestamp.IsZero(), m.Annotations, m.Status.Conditions)
		}
		g.Expect(ymms).To(HaveLen(1), diag)
		g.Expect(ymms[0].Status.HostRef).To(Equal("only"), diag)
		second = running(g)
		g.Expect(second.UID).NotTo(Equal(first.UID))
	}, 90*time.Second).Should(Succeed())
	ms := metalMachines(g, ns)
	g.Expect(ms).To(HaveLen(1))
	g.Expect(ms[0].Status.HostRef).To(Equal("only"))
	g.Expect(ms[0].Spec.ProviderID).To(Equal("yonder-metal://" + ns + "/only"))
	h := host(g, ns, "only")
	g.Expect(h.Spec.ConsumerRef.UID).To(Equal(ms[0].UID))
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	g.Expect(sim.Provisionings()["only"]).To(HaveLen(2), "provisioned once for each Machine")
}
