package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/docpage"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/stack"
)

const (
	// quickstartPage is the page TestSeparateClusters/QuickstartAsWritten runs, relative to the repository root.
	quickstartPage = "docs/quickstart.md"
	// quickstartSite is the stack's site whose two unregistered hosts the page registers.
	quickstartSite = "quickstart"
	// quickstartCluster and quickstartMD are the names the page gives its Cluster and MachineDeployment.
	quickstartCluster = "edge"
	quickstartMD      = "edge-md-0"
	// quickstartMetalSection is the page's bare-metal section (test/e2e/metal runs it).
	quickstartMetalSection = "Bare-metal workers instead (metal flavors)"
)

// testQuickstartAsWritten (TestSeparateClusters/QuickstartAsWritten) runs docs/quickstart.md as a user follows it: every shell block of the page, as
// written, in the page's order, in one shell session (what a block exports, the next sees), from the
// repository's root (it writes out/, as the page does), with nothing set but the variables the page's table
// documents and the user's PATH, HOME and Go settings. Its management cluster is a fresh one that runs
// cert-manager and nothing else, as the page requires: the page's own `clusterctl init` installs the
// providers there (then the stack runs their Deployments as processes: the only stand-in, for the kubelet).
// Its registry is the stack's (TLS with a private CA), its hosts two sshd hosts of the stack nobody
// registered, and the existing cluster the stack's workload cluster. Between blocks the test checks what the
// page promises: after step 4 a worker Ready whose kubelet is the Machine's version and runs a pod; after
// the version patch every Machine replaced by one whose kubelet is the new version and the old host cleaned;
// after the scale the freed host serving the second worker; after the delete every host free and clean and
// no Node left behind. A section the test does not know, or a block more or fewer than it expects, fails it:
// the page cannot change without the test.
func testQuickstartAsWritten(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	t0 := time.Now()
	page, err := docpage.Read(quickstartPage)
	g.Expect(err).NotTo(HaveOccurred())
	hs := st.Spare[quickstartSite]
	g.Expect(hs).To(HaveLen(2), "the stack starts two unregistered hosts at site %s", quickstartSite)
	// The management cluster and the shell the steps use; both start once the page is known to be the one
	// the steps below run.
	var mgmt *stack.Stack
	var sh *docpage.Shell

	// What the user has in hand: the registry's CA, the hosts' login key, the existing cluster's kubeconfig.
	files := t.TempDir()
	caFile, keyFile, kubeconfigFile := filepath.Join(files, "registry-ca.crt"), filepath.Join(files, "id_ed25519"), filepath.Join(files, "existing-cluster.kubeconfig")
	for f, data := range map[string][]byte{caFile: st.Registry.CACertPEM, keyFile: st.ClientKeyPEM, kubeconfigFile: st.Workload.AdminKubeconfig} {
		g.Expect(os.WriteFile(f, data, 0o600)).To(Succeed())
	}
	vars := map[string]string{
		"KUBECONFIG":          "", // the management cluster's admin kubeconfig, once it runs
		"REGISTRY":            st.ImageRepository(),
		"REGISTRY_CA":         caFile,
		"SSH_KEY":             keyFile,
		"EXISTING_KUBECONFIG": kubeconfigFile,
		// The test's pod image is yonder.test/busybox, which the stack's registry mirrors.
		"YONDER_REGISTRY_MIRROR_OF": `["yonder.test"]`,
	}
	perHost := func(h *hosts.Host) map[string]string {
		return map[string]string{"HOST_NAME": h.Name, "HOST_ADDRESS": h.Address.String(), "HOST_KEY": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey)))}
	}
	g.Expect(page.Documents(slices.Collect(maps.Keys(vars))...)).To(Succeed())
	g.Expect(page.Documents(slices.Collect(maps.Keys(perHost(hs[0])))...)).To(Succeed())

	var first []clusterv1.Machine
	steps := []struct {
		heading string
		blocks  int
		// run runs the section's blocks and checks what the page says they do; nil: the section is not run.
		run func(t *testing.T, blocks []string)
	}{
		{"1. Build the local repository and push the images", 1, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
		}},
		{"2. Install the providers into the management cluster", 1, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			NewWithT(t).Expect(mgmt.RunProviders(ctx)).To(Succeed())
		}},
		{"3. Register the registry's CA, the existing control plane and the hosts", 3, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			sh.RunBlock(ctx, t, b[1], nil)
			for _, h := range hs {
				sh.RunBlock(ctx, t, b[2], perHost(h))
			}
		}},
		{"4. Generate and apply the Cluster", 2, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			first = waitQuickstartWorkers(ctx, t, mgmt, 1)
			out := sh.RunBlock(ctx, t, b[1], nil)
			for _, want := range []string{"YonderControlPlane default/" + quickstartCluster, "YonderSSHCluster default/" + quickstartCluster,
				"MachineDeployment default/" + quickstartMD, "Machine default/" + first[0].Name} {
				NewWithT(t).Expect(out).To(ContainSubstring(want))
			}
		}},
		{"5. Upgrade the workers' Kubernetes", 1, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			ms := waitQuickstartWorkers(ctx, t, mgmt, 1)
			g := NewWithT(t)
			g.Expect(ms[0].Name).NotTo(Equal(first[0].Name), "the version patch replaces the Machine")
			g.Expect(ms[0].Spec.Version).NotTo(Equal(first[0].Spec.Version), "the page's patch sets another version than step 4's")
			waitQuickstartHostsFree(ctx, t, mgmt, hs, usedHosts(ms))
			first = ms
		}},
		{"6. Scale", 1, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			ms := waitQuickstartWorkers(ctx, t, mgmt, 2)
			NewWithT(t).Expect(usedHosts(ms)).To(HaveLen(2), "the host the roll freed serves the second worker")
		}},
		{"7. Delete the Cluster", 1, func(t *testing.T, b []string) {
			t.Helper()
			sh.RunBlock(ctx, t, b[0], nil)
			waitQuickstartDeleted(ctx, t, mgmt, hs)
		}},
		// Not run here: test/e2e/metal runs it on its bare-metal stack (Redfish emulator, QEMU host).
		{quickstartMetalSection, 1, nil},
	}
	var want []string
	for _, s := range steps {
		want = append(want, docpage.OutlineLine(s.heading, s.blocks))
	}
	g.Expect(page.Outline()).To(Equal(want), "%s changed: its sections and shell blocks are not the ones this test runs", quickstartPage)
	mgmt = startQuickstartManagement(ctx, t)
	vars["KUBECONFIG"] = mgmt.Management.AdminKubeconfigPath
	sh = docpage.NewShell(t, page, vars)
	for i, s := range steps {
		if s.run == nil {
			continue
		}
		t1 := time.Now()
		if !t.Run(s.heading, func(t *testing.T) { s.run(t, page.Sections[i].Blocks) }) {
			t.FailNow()
		}
		t.Logf("%s: %s", s.heading, time.Since(t1).Round(time.Second))
	}
	t.Logf("%s ran as written in %s", quickstartPage, time.Since(t0).Round(time.Second))
}

// startQuickstartManagement starts the management cluster the page is followed on, running cert-manager and
// no provider. The test's end deletes Cluster edge if a failure left it (so that its hosts are reset and its
// Nodes leave the shared workload cluster) and stops the management cluster.
func startQuickstartManagement(ctx context.Context, t *testing.T) *stack.Stack {
	t.Helper()
	t0 := time.Now()
	mgmt, err := st.StartUserManagement(ctx, "quickstart")
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the Cluster a failure left is deleted before the cluster stops.
	t.Cleanup(func() {
		if err := mgmt.Stop(); err != nil {
			t.Errorf("failed to stop the quickstart's management cluster: %v", err)
		}
	})
	t.Cleanup(func() {
		c := &clusterv1.Cluster{}
		if !t.Failed() || mgmt.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: quickstartCluster}, c) != nil {
			return
		}
		t.Logf("deleting Cluster %s, left by the failure", quickstartCluster)
		if err := mgmt.Client.Delete(ctx, c); err != nil {
			t.Errorf("failed to delete Cluster %s: %v", quickstartCluster, err)
			return
		}
		waitQuickstartDeleted(ctx, t, mgmt, st.Spare[quickstartSite])
	})
	t.Logf("management cluster with cert-manager and no provider up in %s", time.Since(t0).Round(time.Second))
	return mgmt
}

// waitQuickstartWorkers waits until Cluster edge has n Machines of its MachineDeployment's version
// (waitWorkersOfVersion), checks their providerIDs name the quickstart site's hosts and that each Node runs
// pods that answer (expectPodsAnswer). It returns the Machines.
func waitQuickstartWorkers(ctx context.Context, t *testing.T, mgmt *stack.Stack, n int) []clusterv1.Machine {
	t.Helper()
	got := waitWorkersOfVersion(ctx, t, mgmt, metav1.NamespaceDefault, quickstartCluster, quickstartMD, n)
	for _, m := range got {
		NewWithT(t).Expect(m.Spec.ProviderID).To(HavePrefix("yonder-ssh://" + metav1.NamespaceDefault + "/" + quickstartSite + "-"))
	}
	expectPodsAnswer(ctx, t, got)
	return got
}

// waitWorkersOfVersion waits until Cluster ns/cluster on management cluster mgmt has n Machines, none
// deleting, each of the version of MachineDeployment ns/md with a Ready Node whose providerID is the
// Machine's and whose kubelet reports that version. It returns the Machines.
func waitWorkersOfVersion(ctx context.Context, t *testing.T, mgmt *stack.Stack, ns, cluster, mdName string, n int) []clusterv1.Machine {
	t.Helper()
	t0 := time.Now()
	var last string
	var got []clusterv1.Machine
	err := stack.WaitFor(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
		md := &clusterv1.MachineDeployment{}
		if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mdName}, md); err != nil {
			return false, err
		}
		want := md.Spec.Template.Spec.Version
		list := &clusterv1.MachineList{}
		if err := mgmt.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return false, err
		}
		nodes, err := readyNodes(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // the workload apiserver answers again next poll
		}
		vs, err := kubeletVersions(ctx, list.Items)
		if err != nil {
			return false, nil //nolint:nilerr // a Node replaced while listed: ask again
		}
		var states []string
		ok := 0
		for _, m := range list.Items {
			version := m.Spec.Version
			ready := m.Status.NodeRef.IsDefined() && m.Spec.ProviderID != "" && nodes[m.Status.NodeRef.Name] == m.Spec.ProviderID
			states = append(states, fmt.Sprintf("%s phase=%s version=%s kubelet=%s providerID=%q ready=%t", m.Name, m.Status.Phase, version, vs[m.Name], m.Spec.ProviderID, ready))
			if m.DeletionTimestamp.IsZero() && ready && version == want && vs[m.Name] == want {
				ok++
			}
		}
		sort.Strings(states)
		last, got = "MachineDeployment at "+want+": "+strings.Join(states, "; "), list.Items
		return ok == n && len(list.Items) == n, nil
	})
	if err != nil {
		t.Fatalf("Cluster %s did not reach %d Ready workers of the MachineDeployment's version: %s\nssh manager log:\n%s\nbootstrap manager log:\n%s",
			cluster, n, last, mgmt.ManagerLog("infrastructure-yonder-ssh", 40), mgmt.ManagerLog("bootstrap-yonder", 40))
	}
	t.Logf("%d worker(s) Ready in %s: %s", n, time.Since(t0).Round(time.Second), last)
	return got
}

// kubeletVersions returns the kubelet version of each Machine's Node, by Machine.
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

// waitQuickstartHostsFree waits until exactly the hosts of hs not in used are free in mgmt's inventory, and
// checks that each free one was cleaned (the bootstrap's sentinel is gone).
func waitQuickstartHostsFree(ctx context.Context, t *testing.T, mgmt *stack.Stack, hs []*hosts.Host, used map[string]bool) {
	t.Helper()
	var last []string
	err := stack.WaitFor(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		last = nil
		done := true
		for _, h := range hs {
			sh := &infrav1.YonderSSHHost{}
			if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: h.Name}, sh); err != nil {
				return false, err
			}
			claimed := sh.Spec.ConsumerRef != nil
			last = append(last, fmt.Sprintf("%s claimed=%t", h.Name, claimed))
			done = done && claimed == used[h.Name]
		}
		return done, nil
	})
	if err != nil {
		t.Fatalf("hosts not released as expected (in use: %v): %v", used, last)
	}
	for _, h := range hs {
		if !used[h.Name] {
			expectCleaned(ctx, t, h)
		}
	}
}

// waitQuickstartDeleted waits until Cluster edge is gone, every host free and clean, and no Node of those
// hosts is left in the existing cluster.
func waitQuickstartDeleted(ctx context.Context, t *testing.T, mgmt *stack.Stack, hs []*hosts.Host) {
	t.Helper()
	if err := stack.WaitFor(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: quickstartCluster}, &clusterv1.Cluster{})
		return err != nil, nil
	}); err != nil {
		t.Fatalf("Cluster %s was not deleted: %v\n%s", quickstartCluster, err, mgmt.ManagerLog("cluster-api", 20))
	}
	waitQuickstartHostsFree(ctx, t, mgmt, hs, map[string]bool{})
	var left []string
	if err := stack.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := st.WorkloadClient.List(ctx, nodes); err != nil {
			return false, nil //nolint:nilerr // the workload apiserver answers again next poll
		}
		left = nil
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Spec.ProviderID, "yonder-ssh://"+metav1.NamespaceDefault+"/"+quickstartSite+"-") {
				left = append(left, n.Name)
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("Nodes of the deleted Cluster %s remain in the existing cluster: %v", quickstartCluster, left)
	}
}
