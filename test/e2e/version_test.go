package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/test/stack"
)

const versionCluster = "bump"

// kubeletVersions returns the kubelet version of each Machine's Ready Node, by Machine.
func kubeletVersions(ctx context.Context, ms []clusterv1.Machine) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range ms {
		if !m.Status.NodeRef.IsDefined() {
			continue
		}
		n := &corev1.Node{}
		if err := st.WorkloadClient.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n); err != nil {
			return nil, err
		}
		out[m.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out, nil
}

// waitVersion waits until the Cluster has n Machines of version, each with a Ready Node whose kubelet
// reports that version, and returns them.
func waitVersion(ctx context.Context, t *testing.T, version string, n int, timeout time.Duration) []clusterv1.Machine {
	t.Helper()
	var last string
	var got []clusterv1.Machine
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		ms, err := machines(ctx, versionCluster)
		if err != nil {
			return false, err
		}
		nodes, err := readyNodes(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // the workload apiserver answers again next poll
		}
		vs, err := kubeletVersions(ctx, ms)
		if err != nil {
			return false, nil //nolint:nilerr // a Node replaced while listed: ask again
		}
		var states []string
		ok := 0
		for _, m := range ms {
			ready := m.Status.NodeRef.IsDefined() && m.Spec.ProviderID != "" && nodes[m.Status.NodeRef.Name] == m.Spec.ProviderID
			states = append(states, fmt.Sprintf("%s spec.version=%s kubelet=%s ready=%t", m.Name, m.Spec.Version, vs[m.Name], ready))
			if m.DeletionTimestamp.IsZero() && ready && m.Spec.Version == version && vs[m.Name] == version {
				ok++
			}
		}
		sort.Strings(states)
		last, got = strings.Join(states, "; "), ms
		return ok == n && len(ms) == n, nil
	})
	if err != nil {
		t.Fatalf("Cluster %s did not reach %d workers with kubelet %s in %s: %s", versionCluster, n, version, timeout, last)
	}
	return got
}

// Node software follows the Machine's version: workers of a MachineDeployment at the previous Kubernetes
// version run that kubelet (the node image of the version, chosen by the bootstrap provider, pulled and
// verified by the agent); bumping spec.template.spec.version rolls them onto Machines whose kubelet is
// the new version, and the old hosts are cleaned and released.
func testVersionBump(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	apply(ctx, t, generateClusterVersion(ctx, t, versionCluster, "ssh", 2, stack.PreviousKubernetesVersion))
	old := waitVersion(ctx, t, stack.PreviousKubernetesVersion, 2, 8*time.Minute)
	t.Logf("2 workers Ready with kubelet %s in %s", stack.PreviousKubernetesVersion, time.Since(t0).Round(time.Second))

	t0 = time.Now()
	md := &clusterv1.MachineDeployment{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: versionCluster + "-md-0"}, md)).To(Succeed())
	p := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = stack.KubernetesVersion
	g.Expect(st.Client.Patch(ctx, md, p)).To(Succeed())
	ms := waitVersion(ctx, t, stack.KubernetesVersion, 2, 10*time.Minute)
	for _, m := range ms {
		for _, o := range old {
			g.Expect(m.Name).NotTo(Equal(o.Name), "the version bump replaces every Machine")
		}
	}
	waitReleased(ctx, t, usedHosts(ms), 3*time.Minute)
	t.Logf("version bump %s → %s rolled 2 workers (old hosts cleaned) in %s", stack.PreviousKubernetesVersion, stack.KubernetesVersion, time.Since(t0).Round(time.Second))
	deleteCluster(ctx, t, versionCluster)
}
