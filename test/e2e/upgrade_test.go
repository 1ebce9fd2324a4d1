package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
)

const (
	upgradeCluster = "upgrade"
	// nextRelease is the version the providers are upgraded to from the stack's v0.1.0.
	nextRelease = "v0.2.0"
)

// TestClusterctlUpgrade: `clusterctl upgrade` from the locally built v0.1.0 to v0.2.0 leaves running
// Machines alone. With a Cluster of 2 Ready workers, the next release is laid out in the same local
// repository (hack/release-repo.sh keeps v0.1.0; v0.2.0 carries the same images, built from this tree);
// `clusterctl upgrade plan` offers it for the three Yonder providers, `clusterctl upgrade apply --contract
// v1beta2` (with the variables of init) replaces their components, and the managers run again from the new
// Deployments (new ServiceAccounts, certificates and webhook configurations). Then clusterctl's inventory
// says v0.2.0, the Machines are the same objects, Running, their Nodes the same Ready Nodes and each
// node's kubelet the same process (nothing bootstrapped or reset again); a scale-up proves the upgraded
// providers work, and deleting the Cluster frees every host. It runs last: from then on the stack's
// clusterctl config points at v0.2.0.
func TestClusterctlUpgrade(t *testing.T) {
	deleteOnFailure(t, upgradeCluster)
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	apply(ctx, t, generateCluster(ctx, t, upgradeCluster, "ssh", 2))
	before := waitWorkers(ctx, t, upgradeCluster, 2, 8*time.Minute)
	t.Logf("2 workers on v0.1.0 Ready in %s", time.Since(t0).Round(time.Second))
	uids := map[string]types.UID{}
	kubelets := map[string][]int{}
	for _, m := range before {
		uids[m.Name] = m.UID
		pids, err := kubeletPIDs(hostByName(hostOf(m.Spec.ProviderID)))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pids).NotTo(BeEmpty())
		kubelets[m.Spec.ProviderID] = pids
	}
	nodesBefore, err := readyNodes(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	t1 := time.Now()
	g.Expect(st.AddRelease(ctx, nextRelease)).To(Succeed())
	plan, err := st.Clusterctl(ctx, nil, "upgrade", "plan")
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("clusterctl upgrade plan:\n%s", plan)
	for _, p := range []string{"bootstrap-yonder", "control-plane-yonder", "infrastructure-yonder-ssh"} {
		g.Expect(plan).To(MatchRegexp(`(?m)^`+p+`\s+\S+\s+\S+\s+v0\.1\.0\s+`+nextRelease+`\s*$`), "upgrade plan does not offer %s %s", p, nextRelease)
	}
	_, err = st.Clusterctl(ctx, st.InitEnv(), "upgrade", "apply", "--contract", "v1beta2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.ReloadManagers(ctx)).To(Succeed())
	t.Logf("clusterctl upgrade apply to %s and managers running again in %s", nextRelease, time.Since(t1).Round(time.Second))

	providers := &unstructured.UnstructuredList{}
	providers.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("ProviderList"))
	g.Expect(st.Client.List(ctx, providers)).To(Succeed())
	versions := map[string]string{}
	for _, p := range providers.Items {
		v, _, _ := unstructured.NestedString(p.Object, "version")
		versions[p.GetName()] = v
	}
	g.Expect(versions).To(HaveKeyWithValue("bootstrap-yonder", nextRelease))
	g.Expect(versions).To(HaveKeyWithValue("control-plane-yonder", nextRelease))
	g.Expect(versions).To(HaveKeyWithValue("infrastructure-yonder-ssh", nextRelease))

	// Running Machines left alone: same objects, same Nodes, same kubelets — throughout a while after the
	// upgraded managers started reconciling them.
	g.Consistently(func(g Gomega) {
		after, err := machines(ctx, upgradeCluster)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(after).To(HaveLen(len(uids)))
		for _, m := range after {
			g.Expect(uids).To(HaveKeyWithValue(m.Name, m.UID), "Machine %s was replaced by the upgrade", m.Name)
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)))
			pids, err := kubeletPIDs(hostByName(hostOf(m.Spec.ProviderID)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pids).To(Equal(kubelets[m.Spec.ProviderID]), "the node of %s was bootstrapped or reset again", m.Name)
		}
	}, 15*time.Second, 3*time.Second).Should(Succeed())
	nodesAfter, err := readyNodes(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nodesAfter).To(Equal(nodesBefore))

	// The upgraded providers do their job.
	t1 = time.Now()
	scale(ctx, t, upgradeCluster+"-md-0", 3)
	expectPodsAnswer(ctx, t, waitWorkers(ctx, t, upgradeCluster, 3, 8*time.Minute))
	t.Logf("scale-up on %s: third worker Ready and every Node running pods in %s", nextRelease, time.Since(t1).Round(time.Second))
	deleteCluster(ctx, t, upgradeCluster)
	t.Logf("upgrade scenario in %s", time.Since(t0).Round(time.Second))
}
