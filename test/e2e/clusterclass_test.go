package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/stack"
)

const classCluster = "classy"

// TestClusterClass is scenario 5: the same story through a ClusterClass. `clusterctl generate cluster
// --flavor ssh-clusterclass` renders a topology Cluster (and clusterctl adds the yonder-ssh ClusterClass
// from the repository); CAPI's topology controller creates the YonderControlPlane — with spec.version from
// the topology, which the attached cluster satisfies — the YonderSSHCluster and the MachineDeployment;
// workers join. Changing a topology variable (nodeLabels) rolls every worker onto a patched
// YonderConfigTemplate; deleting the Cluster returns every host clean.
func TestClusterClass(t *testing.T) {
	deleteOnFailure(t, classCluster)
	ctx := context.Background()
	t0 := time.Now()
	ms := classClusterUp(ctx, t)
	rollTopologyVariable(ctx, t, ms)
	t2 := time.Now()
	deleteCluster(ctx, t, classCluster)
	t.Logf("scenario 5: topology Cluster deleted, hosts released and clean, in %s (whole scenario %s)",
		time.Since(t2).Round(time.Second), time.Since(t0).Round(time.Second))
}

// classClusterUp applies the topology Cluster clusterctl renders with 2 workers, waits for them and
// checks that the topology controller set the control plane's version, which the attached cluster runs.
func classClusterUp(ctx context.Context, t *testing.T) []clusterv1.Machine {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	objs := generateCluster(ctx, t, classCluster, "ssh-clusterclass", 2)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	g.Expect(kinds).To(HaveKey("ClusterClass"), "clusterctl should add the ClusterClass the topology names")
	apply(ctx, t, objs)
	ms := waitWorkers(ctx, t, classCluster, 2, 8*time.Minute)
	t.Logf("scenario 5: topology Cluster with 2 Ready workers in %s", time.Since(t0).Round(time.Second))
	expectPodsAnswer(ctx, t, ms)

	// The topology controller owns the control plane object and sets its version; the attached cluster
	// runs it, so nothing holds the workers.
	cpList := &controlplanev1.YonderControlPlaneList{}
	g.Expect(st.Client.List(ctx, cpList, client.InNamespace(st.HostNamespace), client.MatchingLabels{clusterv1.ClusterNameLabel: classCluster})).To(Succeed())
	g.Expect(cpList.Items).To(HaveLen(1))
	cp := &cpList.Items[0]
	g.Expect(cp.Spec.Version).To(Equal(stack.KubernetesVersion))
	g.Eventually(func(g Gomega) {
		got := &controlplanev1.YonderControlPlane{}
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(cp), got)).To(Succeed())
		g.Expect(conditions.IsTrue(got, controlplanev1.YonderControlPlaneVersionUpToDateCondition)).To(BeTrue())
		g.Expect(got.Status.Version).To(Equal(stack.KubernetesVersion))
	}, time.Minute, time.Second).Should(Succeed())
	return ms
}

// rollTopologyVariable changes a topology variable: a rollout onto new Machines (replacing ms) whose
// Nodes carry the label, old hosts cleaned.
func rollTopologyVariable(ctx context.Context, t *testing.T, ms []clusterv1.Machine) {
	t.Helper()
	g := NewWithT(t)
	t1 := time.Now()
	cluster := &clusterv1.Cluster{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: classCluster}, cluster)).To(Succeed())
	base := cluster.DeepCopy()
	found := false
	for i, v := range cluster.Spec.Topology.Variables {
		if v.Name == "nodeLabels" {
			cluster.Spec.Topology.Variables[i].Value.Raw = []byte(`{"example.com/class":"v2"}`)
			found = true
		}
	}
	if !found {
		cluster.Spec.Topology.Variables = append(cluster.Spec.Topology.Variables, clusterv1.ClusterVariable{
			Name: "nodeLabels", Value: apiextensionsv1.JSON{Raw: []byte(`{"example.com/class":"v2"}`)}})
	}
	g.Expect(st.Client.Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())

	old := map[string]bool{}
	for _, m := range ms {
		old[m.Name] = true
	}
	var last string
	err := stack.WaitFor(ctx, 10*time.Minute, func(ctx context.Context) (bool, error) {
		cur, err := machines(ctx, classCluster)
		if err != nil {
			return false, err
		}
		nodes, err := readyNodes(ctx)
		if err != nil {
			return false, nil
		}
		fresh := 0
		for _, m := range cur {
			if old[m.Name] {
				last = fmt.Sprintf("old Machine %s still there", m.Name)
				return false, nil
			}
			if m.Status.NodeRef.IsDefined() && m.Spec.ProviderID != "" && nodes[m.Status.NodeRef.Name] == m.Spec.ProviderID {
				fresh++
			}
		}
		last = fmt.Sprintf("%d new Machines with Ready Nodes of %d", fresh, len(cur))
		return fresh == 2 && len(cur) == 2, nil
	})
	if err != nil {
		t.Fatalf("topology variable rollout did not finish: %s: %v\n%s", last, err, st.ManagerLog("cluster-api", 30))
	}
	cur, err := machines(ctx, classCluster)
	g.Expect(err).NotTo(HaveOccurred())
	labels, err := nodeLabels(ctx, cur, "example.com/class")
	g.Expect(err).NotTo(HaveOccurred())
	for node, v := range labels {
		g.Expect(v).To(Equal("v2"), "Node %s lacks the label set through the topology variable", node)
	}
	expectPodsAnswer(ctx, t, cur)
	waitReleased(ctx, t, usedHosts(cur), 3*time.Minute)
	t.Logf("scenario 5: topology variable rolled 2 workers in %s", time.Since(t1).Round(time.Second))
}
