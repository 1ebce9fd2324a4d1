package e2e

import (
	"context"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/stack"
)

const movedCluster = "moved"

// TestMove is scenario 6, the bootstrap-and-pivot flow users run: `clusterctl move` of a Yonder cluster
// into the workload cluster itself, whose providers run as Pods on its own Nodes, and back.
//
//  0. The workload cluster becomes a management cluster: the real `clusterctl init` installs cert-manager's
//     chart and the providers there (stack.ManageFromWorkload), and every Deployment runs as Pods on the
//     Cluster's Yonder Nodes, pulled from the registry, Ready through their probes, each the holder of its
//     leader Lease.
//  1. Refused while provisioning: a Machine that is being bootstrapped (its YonderSSHMachine carries the
//     block-move annotation) makes the real clusterctl refuse — at once, by its own check for Machines
//     without a Node, or by waiting on the annotation — and nothing reaches the target. A move aborted in
//     the wait leaves the Cluster paused (clusterctl's behaviour): it is unpaused and the Machine finishes.
//  2. Idle: the Cluster, every YonderSSHHost (free ones too: the CRD's move-hierarchy label) and the
//     hosts' credential Secret move, through the webhooks the Pods serve; the source keeps none of them.
//     Claims survive (spec.consumerRef), the moved Machines find their hosts and runs again (the claim-id
//     annotation), nothing is bootstrapped again (same kubelet processes) and every Node stays Ready.
//  3. The providers in Pods take over: the Cluster was made at the previous Kubernetes version, and a
//     version bump rolls its workers — the Nodes the providers run on — to Machines whose kubelets report
//     the new version (hosts claimed over SSH from a Pod, bootstrap tokens from a Pod); the evicted Pods
//     carry on from the new Nodes, and every old host comes back clean.
//  4. Back: the Cluster, its Machines and every host move back to the source, whose providers take over
//     again without bootstrapping anything; the providers are deleted from the workload cluster as a user
//     deletes them (`clusterctl delete --all`), and deleting the Cluster on the source returns every host
//     clean.
//
// It runs after TestScenarios on the same stack and needs only that every host is free.
func TestMove(t *testing.T) {
	// Registered first, so it runs last: after startTarget's cleanup has brought the hosts home.
	deleteOnFailure(t, movedCluster)
	ctx := context.Background()
	t0 := time.Now()
	source := st
	md := movedCluster + "-md-0"
	moveClusterUp(ctx, t, source)
	target := startTarget(ctx, t, source)
	move := func(ctx context.Context) (string, error) {
		return source.Clusterctl(ctx, nil, "move", "--to-kubeconfig", target.Management.AdminKubeconfigPath, "-n", source.HostNamespace, "-v", "1")
	}
	ms := moveRefusedWhileProvisioning(ctx, t, source, target, md, move)
	moveIdle(ctx, t, source, target, ms, move)
	targetTakesOver(ctx, t, target, md, ms)
	moveBack(ctx, t, source, target)
	t0d := time.Now()
	deleteCluster(ctx, t, movedCluster)
	t.Logf("Cluster deleted on the source, every host clean and free, in %s", time.Since(t0d).Round(time.Second))
	t.Logf("scenario 6 (move) took %s", time.Since(t0).Round(time.Second))
}

// moveClusterUp checks that the namespace holds no Cluster (clusterctl move carries every Cluster of the
// namespace, and the scenario needs 3 free hosts: a Cluster that an earlier, failed scenario left would be
// moved too and block the move) and creates the Cluster to move with 1 worker at the previous Kubernetes
// version.
func moveClusterUp(ctx context.Context, t *testing.T, source *stack.Stack) {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	left := &clusterv1.ClusterList{}
	g.Expect(source.Client.List(ctx, left, client.InNamespace(source.HostNamespace))).To(Succeed())
	if len(left.Items) > 0 {
		t.Fatalf("scenario 6 needs namespace %s without Clusters; an earlier scenario left %s", source.HostNamespace, left.Items[0].Name)
	}
	// At the previous Kubernetes version: part 3 bumps it under the providers running as Pods.
	apply(ctx, t, generateClusterVersion(ctx, t, movedCluster, "ssh", 1, stack.PreviousKubernetesVersion))
	waitWorkers(ctx, t, movedCluster, 1, 8*time.Minute)
	t.Logf("cluster %s with 1 worker ready in %s", movedCluster, time.Since(t0).Round(time.Second))
}

// startTarget makes the workload cluster a management cluster whose providers run as Pods on its Nodes (part
// 0); the test's end deletes them there again and points the scenarios' helpers back at source. A failure
// past the move leaves the hosts on the target: the end brings them home first, unless moveBack did.
func startTarget(ctx context.Context, t *testing.T, source *stack.Stack) *stack.Stack {
	t.Helper()
	t0 := time.Now()
	target, err := source.ManageFromWorkload(ctx)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		st = source
		if hostsLeftOn(ctx, target) {
			mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			out, err := target.Clusterctl(mctx, nil, "move", "--to-kubeconfig", source.Management.AdminKubeconfigPath, "-n", target.HostNamespace)
			cancel()
			if err != nil {
				t.Logf("failed to move the hosts back to the source: %v: %s", err, out)
			}
		}
		if err := target.Stop(); err != nil {
			t.Errorf("failed to delete the providers from the workload cluster: %v", err)
		}
	})
	expectProvidersAsPods(ctx, t, source, target)
	t.Logf("workload cluster managing, its providers running as Pods, in %s", time.Since(t0).Round(time.Second))
	return target
}

// expectProvidersAsPods checks what makes the workload cluster's providers and its cert-manager Pods like on
// any user's cluster: every Deployment's Pods run on the workload cluster's Yonder Nodes, Ready through their
// probes, with images pulled from the stack's registry through the nodes' mirrors (Yonder's release images,
// pinned by digest, under ghcr.io; CAPI's under registry.k8s.io; cert-manager's chart's under quay.io), and
// each of them that elects a leader runs under a Lease that one of its Pods holds (the identities of
// controller-runtime and client-go's leader election start with the Pod's host name, its name):
// cert-manager's controller and cainjector in kube-system (the chart's --leader-election-namespace), the
// providers in their own namespaces. cert-manager's webhook elects none.
func expectProvidersAsPods(ctx context.Context, t *testing.T, source, target *stack.Stack) {
	t.Helper()
	g := NewWithT(t)
	providers, err := target.ProviderPods(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	// The providers the stack's management cluster has: Yonder's three, CAPI's core and kubeadm providers.
	g.Expect(providers).To(HaveLen(len(source.Managers())), "one Deployment per provider")
	certManager, err := target.CertManagerPods(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(certManager).To(HaveLen(3), "cert-manager's chart has three Deployments")
	nodes, err := readyNodes(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var summary []string
	check := func(byDeployment map[string][]corev1.Pod, image func(d string) types.GomegaMatcher, leaseNamespace func(d string) string) {
		for d, pods := range byDeployment {
			g.Expect(pods).NotTo(BeEmpty(), "Deployment %s has no Pod", d)
			var names []string
			for _, p := range pods {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "Pod %s of %s", p.Name, d)
				g.Expect(nodes).To(HaveKey(p.Spec.NodeName), "Pod %s of %s runs on a Ready Node", p.Name, d)
				g.Expect(nodes[p.Spec.NodeName]).To(HavePrefix("yonder-ssh://"), "Pod %s of %s runs on a Yonder Node", p.Name, d)
				for _, c := range p.Spec.Containers {
					g.Expect(c.Image).To(image(d), "the image of Pod %s of %s", p.Name, d)
				}
				for _, cs := range p.Status.ContainerStatuses {
					g.Expect(cs.Ready).To(BeTrue(), "container %s of Pod %s", cs.Name, p.Name)
					g.Expect(cs.ImageID).To(ContainSubstring("@sha256:"), "container %s of Pod %s ran a pulled image", cs.Name, p.Name)
				}
				names = append(names, p.Name+" on "+p.Spec.NodeName)
			}
			if ns := leaseNamespace(d); ns != "" {
				leases := &coordinationv1.LeaseList{}
				g.Expect(target.Client.List(ctx, leases, client.InNamespace(ns))).To(Succeed())
				held := false
				for _, l := range leases.Items {
					for _, p := range pods {
						if h := ptr.Deref(l.Spec.HolderIdentity, ""); strings.HasPrefix(h, p.Name+"_") {
							held = true
						}
					}
				}
				g.Expect(held).To(BeTrue(), "a Pod of %s holds its leader Lease in %s", d, ns)
			}
			summary = append(summary, d+": "+strings.Join(names, ", "))
		}
	}
	check(providers, func(d string) types.GomegaMatcher {
		if strings.Contains(d, "yonder") {
			// The release pins Yonder's images by digest under their published name.
			return MatchRegexp(`^ghcr\.io/yonder-dev/yonder-[a-z]+-manager@sha256:[0-9a-f]{64}$`)
		}
		return HavePrefix("registry.k8s.io/cluster-api/")
	}, func(d string) string { ns, _, _ := strings.Cut(d, "/"); return ns })
	check(certManager, func(string) types.GomegaMatcher {
		return MatchRegexp(`^quay\.io/jetstack/cert-manager-(controller|cainjector|webhook):v[0-9.]+$`)
	}, func(d string) string {
		if strings.HasSuffix(d, "-webhook") {
			return ""
		}
		return metav1.NamespaceSystem
	})
	sort.Strings(summary)
	t.Logf("running as Pods: %s", strings.Join(summary, "; "))
}

// moveRefusedWhileProvisioning is part 1: a scale-up; while its Machine provisions, the move waits and
// creates nothing on the target. The Cluster is unpaused afterwards; it returns the two ready workers.
func moveRefusedWhileProvisioning(ctx context.Context, t *testing.T, source, target *stack.Stack, md string, move func(context.Context) (string, error)) []clusterv1.Machine {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	scale(ctx, t, md, 2)
	g.Expect(stack.WaitFor(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		ms := &infrav1.YonderSSHMachineList{}
		if err := source.Client.List(ctx, ms, client.InNamespace(source.HostNamespace)); err != nil {
			return false, err
		}
		for _, m := range ms.Items {
			if _, ok := m.Annotations[clusterctlv1.BlockMoveAnnotation]; ok {
				return true, nil
			}
		}
		return false, nil
	})).To(Succeed(), "no YonderSSHMachine carried the block-move annotation while provisioning")
	// clusterctl waits about 6 minutes before it gives up; 30 s of waiting shows the refusal.
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := move(mctx)
	cancel()
	g.Expect(err).To(HaveOccurred(), "clusterctl move went ahead while a Machine was provisioning: %s", out)
	// clusterctl refuses at once while a Machine has no Node yet ("still provisioning the node"); past that
	// check (or racing it), the YonderSSHMachine's block-move annotation makes it wait.
	g.Expect(out+err.Error()).To(Or(ContainSubstring("still provisioning"), ContainSubstring("block-move")), "refused for another reason")
	t.Logf("clusterctl move refused while provisioning: %s", errorLine(err.Error()))
	for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &infrav1.YonderSSHHostList{}, &infrav1.YonderSSHMachineList{}} {
		g.Expect(target.Client.List(ctx, l, client.InNamespace(source.HostNamespace))).To(Succeed())
		g.Expect(l).To(HaveField("Items", BeEmpty()), "a blocked move created objects on the target")
	}
	c := &clusterv1.Cluster{}
	g.Expect(source.Client.Get(ctx, client.ObjectKey{Namespace: source.HostNamespace, Name: movedCluster}, c)).To(Succeed())
	if ptr.Deref(c.Spec.Paused, false) {
		// Refused at the block-move wait: clusterctl paused the Cluster first and leaves it paused.
		p := client.MergeFrom(c.DeepCopy())
		c.Spec.Paused = ptr.To(false)
		g.Expect(source.Client.Patch(ctx, c, p)).To(Succeed())
	}
	ms := waitWorkers(ctx, t, movedCluster, 2, 8*time.Minute)
	t.Logf("move refused while provisioning; after unpausing, 2 workers ready in %s", time.Since(t0).Round(time.Second))
	return ms
}

// moveIdle is part 2: the idle move goes through; the source keeps nothing, every host moved with its
// claim and credential Secret, and Nodes and kubelets are unchanged. From here on the scenarios' helpers
// act on the target. ms are the workers before the move.
func moveIdle(ctx context.Context, t *testing.T, source, target *stack.Stack, ms []clusterv1.Machine, move func(context.Context) (string, error)) {
	t.Helper()
	g := NewWithT(t)
	before, err := claims(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	nodesBefore, err := readyNodes(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	kubelets := hostKubelets(g, ms)
	t0 := time.Now()
	_, err = move(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("clusterctl move took %s", time.Since(t0).Round(time.Second))

	for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineList{}, &infrav1.YonderSSHHostList{}, &infrav1.YonderSSHMachineList{}} {
		g.Expect(source.Client.List(ctx, l, client.InNamespace(source.HostNamespace))).To(Succeed())
		g.Expect(l).To(HaveField("Items", BeEmpty()), "the source kept moved objects")
	}
	st = target
	after, err := claims(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(before), "every host (free ones too) moved with its claim")
	expectHostSecrets(ctx, g, target, "did not move")
	ms = waitWorkers(ctx, t, movedCluster, 2, 5*time.Minute)
	nodesAfter, err := readyNodes(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nodesAfter).To(Equal(nodesBefore))
	expectSameKubelets(g, kubelets, "the move")
	expectMachinesRunning(ctx, g, len(ms))
	t.Logf("after the move: claims, Nodes and kubelets unchanged, Machines Running again in %s", time.Since(t0).Round(time.Second))
}

// targetTakesOver is part 3: the providers running as Pods on the Cluster's own workers roll those workers
// to the next Kubernetes version. The MachineDeployment's version bump replaces every Machine with one
// whose Node's kubelet reports that version (new hosts claimed and bootstrapped over SSH from a Pod, with
// bootstrap tokens from a Pod); the rollout drains the Nodes that run the providers, whose Pods are evicted
// and carry on from the new Nodes (leader election hands over); each old host comes back clean and free.
// ms are the workers before.
func targetTakesOver(ctx context.Context, t *testing.T, target *stack.Stack, md string, ms []clusterv1.Machine) {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	d := &clusterv1.MachineDeployment{}
	g.Expect(target.Client.Get(ctx, client.ObjectKey{Namespace: target.HostNamespace, Name: md}, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.Version).To(Equal(stack.PreviousKubernetesVersion))
	p := client.MergeFrom(d.DeepCopy())
	d.Spec.Template.Spec.Version = stack.KubernetesVersion
	g.Expect(target.Client.Patch(ctx, d, p)).To(Succeed())
	rolled := waitWorkersOfVersion(ctx, t, target, target.HostNamespace, movedCluster, md, len(ms))
	for _, old := range ms {
		g.Expect(rolled).NotTo(ContainElement(HaveField("Name", old.Name)), "Machine %s was not replaced", old.Name)
	}
	expectPodsAnswer(ctx, t, rolled)
	waitReleased(ctx, t, usedHosts(rolled), 3*time.Minute)
	// Every provider and cert-manager is running again after its Pods were evicted from the old Nodes.
	g.Eventually(func(g Gomega) {
		pods, err := target.ProviderPods(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		cm, err := target.CertManagerPods(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		maps.Copy(pods, cm)
		nodes, err := readyNodes(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for d, ps := range pods {
			running := 0
			for _, p := range ps {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() && nodes[p.Spec.NodeName] != "" {
					running++
				}
			}
			g.Expect(running).To(Equal(1), "Deployment %s runs one Pod on a Ready Node", d)
		}
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	t.Logf("version bump %s → %s under the providers in Pods: %d workers replaced, old hosts clean, every Pod running again, in %s",
		stack.PreviousKubernetesVersion, stack.KubernetesVersion, len(rolled), time.Since(t0).Round(time.Second))
}

// moveBack is part 4: the Cluster with its Machines and every host move from the target back to the source,
// claims and kubelets unchanged, and the source's providers take over (its Machines Running again); the
// target keeps nothing, and its providers are deleted.
func moveBack(ctx context.Context, t *testing.T, source, target *stack.Stack) {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	before, err := claims(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	ms, err := machines(ctx, movedCluster)
	g.Expect(err).NotTo(HaveOccurred())
	kubelets := hostKubelets(g, ms)
	_, err = target.Clusterctl(ctx, nil, "move", "--to-kubeconfig", source.Management.AdminKubeconfigPath, "-n", target.HostNamespace, "-v", "1")
	g.Expect(err).NotTo(HaveOccurred())
	st = source
	home, err := claims(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(home).To(Equal(before), "every host returns to the source with its claim")
	expectHostSecrets(ctx, g, source, "did not move back")
	g.Expect(hostsLeftOn(ctx, target)).To(BeFalse(), "the target kept moved hosts")
	waitWorkers(ctx, t, movedCluster, len(ms), 5*time.Minute)
	expectSameKubelets(g, kubelets, "the move back")
	expectMachinesRunning(ctx, g, len(ms))
	t.Logf("the Cluster and every host moved back to the source, Machines Running, in %s", time.Since(t0).Round(time.Second))
	t0 = time.Now()
	g.Expect(target.Stop()).To(Succeed(), "clusterctl delete --all on the workload cluster")
	pods, err := target.ProviderPods(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods).To(BeEmpty(), "clusterctl delete --all left provider Deployments")
	t.Logf("providers deleted from the workload cluster in %s", time.Since(t0).Round(time.Second))
}

// hostKubelets returns the kubelet processes of the Machines' hosts, by host (each host runs one).
func hostKubelets(g Gomega, ms []clusterv1.Machine) map[string][]int {
	kubelets := map[string][]int{}
	for h := range usedHosts(ms) {
		pids, err := kubeletPIDs(hostByName(h))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pids).NotTo(BeEmpty(), "no kubelet on host %s", h)
		kubelets[h] = pids
	}
	return kubelets
}

// expectSameKubelets: every host still runs the kubelet processes it ran before step (nothing was
// bootstrapped or reset again).
func expectSameKubelets(g Gomega, before map[string][]int, step string) {
	for h, pids := range before {
		now, err := kubeletPIDs(hostByName(h))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(now).To(Equal(pids), "host %s was bootstrapped or reset again after %s", h, step)
	}
}

// expectMachinesRunning waits until the moved Cluster has n Machines, all Running: a management cluster's
// Machine controller recomputes each phase once it has connected to the workload cluster, and until then a
// Machine whose Node is already matched can read Provisioned (seen in CI, 2026-12-02).
func expectMachinesRunning(ctx context.Context, g Gomega, n int) {
	g.Eventually(func(g Gomega) {
		now, err := machines(ctx, movedCluster)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(now).To(HaveLen(n))
		for _, m := range now {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}

// expectHostSecrets: every YonderSSHHost on management cluster m has its credential Secret there (what
// went wrong otherwise: the Secret did not move, or not back).
func expectHostSecrets(ctx context.Context, g Gomega, m *stack.Stack, what string) {
	hl := &infrav1.YonderSSHHostList{}
	g.Expect(m.Client.List(ctx, hl, client.InNamespace(m.HostNamespace))).To(Succeed())
	for _, h := range hl.Items {
		sec := &corev1.Secret{}
		g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.CredentialsSecretRef.Name}, sec)).To(Succeed(),
			"credential Secret of host %s %s", h.Name, what)
	}
}

// hostsLeftOn reports whether management cluster m holds YonderSSHHosts (true when it cannot tell).
func hostsLeftOn(ctx context.Context, m *stack.Stack) bool {
	hl := &infrav1.YonderSSHHostList{}
	if err := m.Client.List(ctx, hl, client.InNamespace(m.HostNamespace)); err != nil {
		return true
	}
	return len(hl.Items) > 0
}

// errorLine returns clusterctl's "Error: …" line from its output (all of s when there is none).
func errorLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Error:") {
			return strings.TrimSpace(l)
		}
	}
	return s
}
