package describe

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/site"
	"github.com/yonder-dev/yonder/test/controlplane"
)

func ref(kind, name string) clusterv1.ContractVersionedObjectReference {
	group := builder.InfrastructureGroupVersion.Group
	switch kind {
	case builder.GenericControlPlaneKind:
		group = builder.ControlPlaneGroupVersion.Group
	case builder.GenericBootstrapConfigKind:
		group = builder.BootstrapGroupVersion.Group
	}
	return clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: kind, Name: name}
}

// describe cluster pulls the management side (Cluster, claimed hosts, Machines) and the workload side
// (Nodes, NodeNetworks, PeerSlices) of a real pair of apiservers into one view.
func TestDescribeClusterShowsBothSides(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "describe"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	wl, err := client.New(cp.Config, client.Options{Scheme: cli.Scheme})
	g.Expect(err).NotTo(HaveOccurred())

	ns := env.CreateNamespace(ctx, t, "describe").Name
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: ref(builder.GenericControlPlaneKind, "edge-cp")}}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-md-0-abc", Labels: map[string]string{clusterv1.ClusterNameLabel: "edge"}},
		Spec: clusterv1.MachineSpec{ClusterName: "edge", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr("data")},
			InfrastructureRef: ref(builder.GenericInfrastructureMachineKind, "edge-md-0-abc"), ProviderID: "yonder-ssh://" + ns + "/site-a-0"}}
	g.Expect(env.Create(ctx, machine)).To(Succeed())
	host := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site-a-0"}, Spec: infrav1.YonderSSHHostSpec{
		SSHEndpoint: infrav1.SSHEndpoint{Address: "10.250.9.10", CredentialsSecretRef: infrav1.SecretReference{Name: "s"}}, FailureDomain: "site-a",
		ConsumerRef: &infrav1.ConsumerReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "YonderSSHMachine", Name: "edge-md-0-abc", UID: "u", ClusterName: "edge"}}}
	other := host.DeepCopy()
	other.Name, other.Spec.ConsumerRef.ClusterName = "other-0", "other"
	g.Expect(env.Create(ctx, host)).To(Succeed())
	g.Expect(env.Create(ctx, other)).To(Succeed())

	o := cli.NewOptions().WithConfig(env.Config, ns)
	out := &bytes.Buffer{}
	o.Out, o.ErrOut = out, &bytes.Buffer{}

	// Without the kubeconfig Secret the management side still shows, and says why the rest is missing.
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("Machines: 1"))
	g.Expect(out.String()).To(MatchRegexp(`edge-md-0-abc\s+-\s+site-a-0\s+site-a\s`), "the Machine's host and its failure domain")
	g.Expect(out.String()).NotTo(ContainSubstring("other-0"))
	g.Expect(out.String()).To(ContainSubstring("Nodes (workload cluster): unavailable"))

	g.Expect(cp.WriteKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-md-0-abc", Labels: map[string]string{netv1.SiteLabel: "site-a"}}}
	g.Expect(wl.Create(ctx, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.9.10"}}
	g.Expect(wl.Status().Update(ctx, node)).To(Succeed())

	out.Reset()
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("Nodes (workload cluster): 1"))
	g.Expect(out.String()).To(MatchRegexp(`edge-md-0-abc\s+True\s+site-a\s+10\.250\.9\.10`))
	g.Expect(out.String()).To(ContainSubstring("network add-on is not installed"))

	// With the add-on's CRDs, tunnel objects show.
	objs, err := site.Objects()
	g.Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		if u.GetKind() == "CustomResourceDefinition" {
			g.Expect(wl.Create(ctx, u.DeepCopy())).To(Succeed())
		}
	}
	nn := &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "edge-md-0-abc"}, Spec: netv1.NodeNetworkSpec{
		Endpoints: []netv1.Endpoint{{Address: "10.250.9.10", Type: netv1.EndpointInternal}}, Protocols: []netv1.Protocol{netv1.ProtocolWireGuard}}}
	g.Eventually(func() error { return wl.Create(ctx, nn) }).WithTimeout(30e9).Should(Succeed())
	out.Reset()
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("1 NodeNetworks, 0 PeerSlices"))
	g.Expect(out.String()).To(MatchRegexp(`edge-md-0-abc\s+10\.250\.9\.10\(Internal\)\s+WireGuard`))

	out.Reset()
	o.Output = cli.OutputYAML
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	list := &unstructured.Unstructured{}
	g.Expect(list.UnmarshalJSON(mustJSON(t, out.Bytes()))).To(Succeed())
	items, _, _ := unstructured.NestedSlice(list.Object, "items")
	g.Expect(items).To(HaveLen(5), "Cluster, host, Machine, Node, NodeNetwork")

	g.Expect(Cluster(ctx, o, "missing")).To(MatchError(ContainSubstring("does not exist")))
}

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, y []byte) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
