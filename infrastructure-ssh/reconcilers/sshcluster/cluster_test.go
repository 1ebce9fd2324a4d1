package sshcluster_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

func host(ns, name, fd string, labels map[string]string) *infrav1.YonderSSHHost {
	return &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: infrav1.YonderSSHHostSpec{FailureDomain: fd, SSHEndpoint: infrav1.SSHEndpoint{Address: "192.0.2.1", CredentialsSecretRef: infrav1.SecretReference{Name: "s"},
			HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}}}
}

// With the real CAPI Cluster controller: the YonderSSHCluster is provisioned at once, its
// control plane endpoint reaches the Cluster, its failure domains follow the selected hosts of the
// inventory (a new rack appears when a host there is registered), and a paused Cluster pauses it.
func TestClusterProvisionedWithEndpointAndFailureDomainsFromInventory(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "cl").Name
	for _, h := range []*infrav1.YonderSSHHost{
		host(ns, "a", "rack-1", map[string]string{"site": "edge"}),
		host(ns, "b", "rack-2", map[string]string{"site": "edge"}),
		host(ns, "c", "rack-2", map[string]string{"site": "edge"}),
		host(ns, "d", "dc-9", map[string]string{"site": "core"}),
	} {
		g.Expect(env.Create(ctx, h)).To(Succeed())
	}
	sc := &infrav1.YonderSSHCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: infrav1.YonderSSHClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.example.test", Port: 6443},
			HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"site": "edge"}}}}
	g.Expect(env.Create(ctx, sc)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHCluster", Name: "edge"}}}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	names := func(g Gomega) []string {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(sc), sc)).To(Succeed())
		var out []string
		for _, fd := range sc.Status.FailureDomains {
			out = append(out, fd.Name)
		}
		return out
	}
	g.Eventually(func(g Gomega) {
		g.Expect(names(g)).To(Equal([]string{"rack-1", "rack-2"}))
		g.Expect(sc.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cluster.Spec.ControlPlaneEndpoint.Host).To(Equal("api.example.test"))
		g.Expect(cluster.Status.FailureDomains).To(HaveLen(2))
	}).Should(Succeed())
	g.Expect(env.Create(ctx, host(ns, "e", "rack-3", map[string]string{"site": "edge"}))).To(Succeed())
	g.Eventually(names).Should(Equal([]string{"rack-1", "rack-2", "rack-3"}))

	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Paused = ptr.To(true)
	g.Expect(env.Patch(ctx, cluster, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(sc), sc)).To(Succeed())
		g.Expect(sc.Status.Conditions).To(ContainElement(And(HaveField("Type", clusterv1.PausedCondition), HaveField("Status", metav1.ConditionTrue))))
	}).Should(Succeed())
	g.Expect(env.Create(ctx, host(ns, "f", "rack-4", map[string]string{"site": "edge"}))).To(Succeed())
	g.Consistently(names, "2s").Should(Equal([]string{"rack-1", "rack-2", "rack-3"}), "paused: nothing is reconciled")
}
