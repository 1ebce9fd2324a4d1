package sshmachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// A paused YonderSSHMachine (cluster.x-k8s.io/paused annotation; a paused Cluster works the same way
// through CAPI's pause contract) gets the Paused condition and claims nothing; unpaused, it claims and
// provisions. A provider started with a watch filter ignores objects without the matching
// cluster.x-k8s.io/watch-filter label.
func TestPauseAndWatchFilter(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "pause").Name
	hs, keyPEM := sshhosts.StartForTest(t, "pz", 1)
	registerHosts(g, ns, hs, keyPEM, nil, nil)
	p := startProvider(t, testOptions())
	cluster := newCluster(t, g, ns, "pz")
	p.Stop()

	data := dataSecret(g, ns, "pz", cluster.Name, "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n")
	sm := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused", Annotations: map[string]string{clusterv1.PausedAnnotation: ""}},
		Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"yonder.dev/host": "pz-0"}}}}
	g.Expect(env.Create(ctx, sm)).To(Succeed())
	g.Expect(env.Create(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"},
		Spec: clusterv1.MachineSpec{ClusterName: cluster.Name, Version: "v1.36.3", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "paused"}}})).To(Succeed())

	// A provider that only watches objects labelled watch-filter=other leaves the Machine alone.
	o := testOptions()
	o.WatchFilterValue = "other"
	filtered := startProvider(t, o)
	g.Consistently(func(g Gomega) {
		m := &infrav1.YonderSSHMachine{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "paused"}, m)).To(Succeed())
		g.Expect(m.Finalizers).To(BeEmpty())
		g.Expect(m.Status.Conditions).To(BeEmpty())
	}, 3*time.Second).Should(Succeed())
	filtered.Stop()

	startProvider(t, testOptions())
	g.Eventually(func(g Gomega) {
		m := &infrav1.YonderSSHMachine{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "paused"}, m)).To(Succeed())
		g.Expect(m.Status.Conditions).To(ContainElement(And(HaveField("Type", clusterv1.PausedCondition), HaveField("Status", metav1.ConditionTrue))))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) { g.Expect(checkClaims(g, ns)).To(BeEmpty()) }, 2*time.Second).Should(Succeed())

	g.Eventually(func() error {
		m := &infrav1.YonderSSHMachine{}
		if err := env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "paused"}, m); err != nil {
			return err
		}
		delete(m.Annotations, clusterv1.PausedAnnotation)
		return env.Update(ctx, m)
	}).Should(Succeed())
	g.Eventually(reasonOf(ns, "paused", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.YonderSSHMachineBootstrapSucceededReason))
	g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(sshMachines(g, ns)).To(BeEmpty())
		g.Expect(checkClaims(g, ns)).To(BeEmpty())
	}).Should(Succeed())
}
