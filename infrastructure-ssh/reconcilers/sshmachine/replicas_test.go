package sshmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshtest"
	"github.com/yonder-dev/yonder/test/labnet"
)

// Two provider instances run at once without leader election (the worst case of several replicas):
// they race for the same hosts and the same Machines, yet every Machine ends with its own host and
// every host ran its bootstrap exactly once.
func TestTwoConcurrentControllersNeverDoubleClaim(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "twin").Name
	n := labnet.NewForTest(t)
	keyPEM, _, err := sshtest.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := sshtest.Start(ctx, n, "tw", 4, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	registerHosts(g, ns, hs, keyPEM, map[string]string{"pool": "tw"}, nil)
	startProvider(t, testOptions())
	startProvider(t, testOptions())
	cluster := newCluster(t, g, ns, "tw")
	data := dataSecret(g, ns, "tw", cluster.Name,
		"#cloud-config\nruncmd:\n- echo joined >> /var/lib/yonder-ssh/joined\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n")
	tmpl := &infrav1.YonderSSHMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw"},
		Spec: infrav1.YonderSSHMachineTemplateSpec{Template: infrav1.YonderSSHMachineTemplateResource{
			Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": "tw"}}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	labels := map[string]string{"pool": "tw"}
	g.Expect(env.Create(ctx, &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name, Replicas: ptr.To[int32](4),
			Selector: metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{ClusterName: cluster.Name, Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachineTemplate", Name: tmpl.Name}},
			},
		},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		ms := sshMachines(g, ns)
		g.Expect(ms).To(HaveLen(4))
		for _, m := range ms {
			g.Expect(m.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		}
		g.Expect(checkClaims(g, ns, false)).To(HaveLen(4))
	}).Should(Succeed())
	for _, h := range hs {
		out, err := h.Output(ctx, "cat /var/lib/yonder-ssh/joined")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("joined\n"), "host %s bootstrapped exactly once", h.Name)
	}
}
