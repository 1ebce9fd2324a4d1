package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/stack"
)

const quickCluster = "quick"

// sentinel is what the bootstrap leaves on a host; cleanup removes it.
const sentinel = "/run/cluster-api/bootstrap-success.complete"

// scale sets the MachineDeployment's replicas.
func scale(ctx context.Context, t *testing.T, md string, n int32) {
	t.Helper()
	scaleIn(ctx, t, st.HostNamespace, md, n)
}

// scaleIn is scale for MachineDeployment ns/md.
func scaleIn(ctx context.Context, t *testing.T, ns, md string, n int32) {
	t.Helper()
	d := &clusterv1.MachineDeployment{}
	if err := st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md}, d); err != nil {
		t.Fatal(err)
	}
	p := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &n
	if err := st.Client.Patch(ctx, d, p); err != nil {
		t.Fatalf("failed to scale %s to %d: %v", md, n, err)
	}
}

// claims returns host name → consumer (YonderSSHMachine name, "" when free).
func claims(ctx context.Context) (map[string]string, error) {
	hl := &infrav1.YonderSSHHostList{}
	if err := st.Client.List(ctx, hl, client.InNamespace(st.HostNamespace)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, h := range hl.Items {
		out[h.Name] = ""
		if h.Spec.ConsumerRef != nil {
			out[h.Name] = h.Spec.ConsumerRef.Name
		}
	}
	return out, nil
}

// hostOf returns the host behind a providerID yonder-ssh://<namespace>/<host>.
func hostOf(providerID string) string { return providerID[strings.LastIndex(providerID, "/")+1:] }

// waitReleased waits until exactly the hosts not in used are free and each free host is clean.
func waitReleased(ctx context.Context, t *testing.T, used map[string]bool, timeout time.Duration) {
	t.Helper()
	var last map[string]string
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := claims(ctx)
		if err != nil {
			return false, err
		}
		last = c
		for h, consumer := range c {
			if used[h] != (consumer != "") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("hosts not released as expected (in use: %v): claims %v", used, last)
	}
	for _, h := range allHosts() {
		if !used[h.Name] {
			expectCleaned(ctx, t, h)
		}
	}
}

// expectCleaned checks that a released host was cleaned: the bootstrap's sentinel is gone.
func expectCleaned(ctx context.Context, t *testing.T, h *hosts.Host) {
	t.Helper()
	out, err := h.Output(ctx, "test ! -e "+sentinel+" && echo clean")
	if err != nil || !strings.Contains(out, "clean") {
		t.Fatalf("released host %s was not cleaned (bootstrap sentinel still there): %v %s", h.Name, err, out)
	}
}

func allHosts() []*hosts.Host {
	var hs []*hosts.Host
	for _, site := range st.Hosts {
		hs = append(hs, site...)
	}
	return hs
}

func hostByName(name string) *hosts.Host {
	for _, h := range allHosts() {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// usedHosts returns the hosts behind the Machines.
func usedHosts(ms []clusterv1.Machine) map[string]bool {
	used := map[string]bool{}
	for _, m := range ms {
		used[hostOf(m.Spec.ProviderID)] = true
	}
	return used
}

// testScale: 1 (scenario 1) → 0 → 3 → 5 → 2. At 5 every host runs a node, so the host released at 0
// (and every other released one) is provably claimed, bootstrapped and joined again.
func testScale(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	md := quickCluster + "-md-0"
	before, err := machines(ctx, quickCluster)
	if err != nil {
		t.Fatal(err)
	}
	first := hostOf(before[0].Spec.ProviderID)
	// The operator keeps the agent's caches on that host (docs/infrastructure-ssh.md, "Claim and release
	// semantics"): its release leaves <state-dir>/cache and nothing else, a host without the setting
	// leaves no state directory, and the host's next Machine uses the cache instead of fetching again.
	setKeepAgentCache(ctx, t, first, true)
	t.Cleanup(func() { setKeepAgentCache(context.Background(), t, first, false) })

	scale(ctx, t, md, 0)
	waitWorkers(ctx, t, quickCluster, 0, 3*time.Minute)
	waitReleased(ctx, t, map[string]bool{}, 2*time.Minute)
	cached := expectOnlyCacheKept(ctx, t, first)

	for _, n := range []int{3, 5} {
		t0 := time.Now()
		scale(ctx, t, md, int32(n))
		ms := waitWorkers(ctx, t, quickCluster, n, 8*time.Minute)
		t.Logf("scaled to %d Ready workers in %s", n, time.Since(t0).Round(time.Second))
		used := usedHosts(ms)
		if len(used) != n {
			t.Fatalf("%d Machines share hosts: %v", n, used)
		}
		if n == 5 && !used[first] {
			t.Fatalf("host %s released by the scale to 0 was not reused: %v", first, used)
		}
		if n == 5 {
			// A file fetched again would be a new file (written aside, then renamed into place).
			now := cacheFiles(ctx, t, hostByName(first))
			for f, inode := range cached {
				if now[f] != inode {
					t.Fatalf("host %s fetched %s again instead of using its kept cache (inode %s, now %q)", first, f, inode, now[f])
				}
			}
			// Every host runs a Node now, the reused ones (all that ran one before the scale to 0) included.
			expectPodsAnswer(ctx, t, ms)
		}
	}
	t0 := time.Now()
	scale(ctx, t, md, 2)
	ms := waitWorkers(ctx, t, quickCluster, 2, 5*time.Minute)
	waitReleased(ctx, t, usedHosts(ms), 3*time.Minute)
	t.Logf("scaled down to 2 (3 hosts cleaned and released) in %s", time.Since(t0).Round(time.Second))
	expectEventsTellTheStory(ctx, t)
}

// agentStateDir is the agent's default state directory on the hosts (a private /var/lib per host).
const agentStateDir = "/var/lib/yonder"

// setKeepAgentCache sets spec.cleanup.keepAgentCache on a host, with the merge patch the docs show for
// `kubectl patch`.
func setKeepAgentCache(ctx context.Context, t *testing.T, name string, keep bool) {
	t.Helper()
	h := &infrav1.YonderSSHHost{}
	h.Namespace, h.Name = st.HostNamespace, name
	body := fmt.Sprintf(`{"spec":{"cleanup":{"keepAgentCache":%t}}}`, keep)
	if err := st.Client.Patch(ctx, h, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		t.Fatalf("failed to set keepAgentCache=%t on host %s: %v", keep, name, err)
	}
}

// expectOnlyCacheKept checks what the released hosts kept: the host that keeps the agent's caches has its
// cache and nothing else in the state directory, every other host no state directory. It returns the
// kept host's cached files with their inodes.
func expectOnlyCacheKept(ctx context.Context, t *testing.T, keeper string) map[string]string {
	t.Helper()
	for _, h := range allHosts() {
		out, err := h.Output(ctx, "ls -A "+agentStateDir+" 2>/dev/null; true")
		if err != nil {
			t.Fatalf("failed to list %s on host %s: %v", agentStateDir, h.Name, err)
		}
		want := ""
		if h.Name == keeper {
			want = "cache"
		}
		if got := strings.TrimSpace(out); got != want {
			t.Fatalf("released host %s has %q in %s, want %q", h.Name, got, agentStateDir, want)
		}
	}
	files := cacheFiles(ctx, t, hostByName(keeper))
	if len(files) == 0 {
		t.Fatalf("host %s kept an empty cache", keeper)
	}
	t.Logf("host %s kept %d cached files", keeper, len(files))
	return files
}

// cacheFiles returns the agent's cached files on h with their inode numbers.
func cacheFiles(ctx context.Context, t *testing.T, h *hosts.Host) map[string]string {
	t.Helper()
	out, err := h.Output(ctx, "find "+agentStateDir+"/cache -type f -printf '%i %p\\n'")
	if err != nil {
		t.Fatalf("failed to list the agent's cache on host %s: %v", h.Name, err)
	}
	files := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if inode, path, ok := strings.Cut(l, " "); ok {
			files[path] = inode
		}
	}
	return files
}

// kubeletPIDs returns the kubelet processes running in a host's network namespace (the node's nspawn
// machine shares it).
func kubeletPIDs(h *hosts.Host) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want, err := os.Readlink(h.NamespacePath)
	if err != nil {
		// A named netns is a bind mount, not a link: compare inode numbers instead.
		var st syscall.Stat_t
		if err := syscall.Stat(h.NamespacePath, &st); err != nil {
			return nil, err
		}
		want = fmt.Sprintf("net:[%d]", st.Ino)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && ns == want {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

// testRemediation freezes one node's kubelet: its Node goes NotReady, the MachineHealthCheck marks the
// Machine, CAPI replaces it, and the host is cleaned and released.
func testRemediation(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// The template's MachineHealthCheck remediates while at most 40% are unhealthy: 1 of 3, not 1 of 2.
	scale(ctx, t, quickCluster+"-md-0", 3)
	ms := waitWorkers(ctx, t, quickCluster, 3, 8*time.Minute)
	victim := ms[0]
	h := hostByName(hostOf(victim.Spec.ProviderID))
	g.Expect(h).NotTo(BeNil())
	pids, err := kubeletPIDs(h)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pids).NotTo(BeEmpty(), "no kubelet runs in host %s", h.Name)
	t0 := time.Now()
	// SIGSTOP rather than a kill: the node's systemd would restart a killed kubelet at once.
	for _, pid := range pids {
		g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	}
	// The Machine is marked by the MachineHealthCheck, deleted and replaced.
	err = stack.WaitFor(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		m := &clusterv1.Machine{}
		err := st.Client.Get(ctx, client.ObjectKeyFromObject(&victim), m)
		return err != nil, nil
	})
	if err != nil {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		t.Fatalf("Machine %s with a frozen kubelet was not remediated: %v\n%s", victim.Name, err, st.ManagerLog("cluster-api", 30))
	}
	t.Logf("unhealthy Machine %s remediated (deleted) %s after its kubelet stopped", victim.Name, time.Since(t0).Round(time.Second))
	ms = waitWorkers(ctx, t, quickCluster, 3, 8*time.Minute)
	for _, m := range ms {
		g.Expect(m.Name).NotTo(Equal(victim.Name))
	}
	expectPodsAnswer(ctx, t, ms)
	waitReleased(ctx, t, usedHosts(ms), 3*time.Minute)
	t.Logf("replacement joined and host %s cleaned in %s", h.Name, time.Since(t0).Round(time.Second))
}

// deleteCluster deletes a Cluster and waits until it is gone and every host is free and clean.
func deleteCluster(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	c := &clusterv1.Cluster{}
	c.Name, c.Namespace = name, st.HostNamespace
	if err := st.Client.Delete(ctx, c); err != nil {
		t.Fatalf("failed to delete Cluster %s: %v", name, err)
	}
	if err := stack.WaitFor(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		err := st.Client.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err != nil, nil
	}); err != nil {
		t.Fatalf("Cluster %s was not deleted: %v\n%s", name, err, st.ManagerLog("cluster-api", 20))
	}
	waitReleased(ctx, t, map[string]bool{}, 3*time.Minute)
	// The attached workload cluster outlives the Cluster: the released hosts' Node objects must not (CAPI
	// skips Node deletion while a Cluster is deleted; the SSH provider removes them after cleaning the
	// host), else the next Machine on a host shares its providerID with a stale Node and never gets a nodeRef.
	var stale []string
	if err := stack.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		nodes := &corev1.NodeList{}
		if err := st.WorkloadClient.List(ctx, nodes); err != nil {
			return false, nil
		}
		stale = nil
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Spec.ProviderID, "yonder-ssh://") {
				stale = append(stale, n.Name+"="+n.Spec.ProviderID)
			}
		}
		return len(stale) == 0, nil
	}); err != nil {
		t.Fatalf("Nodes of the deleted Cluster %s remain in the workload cluster: %v\n%s", name, stale, st.ManagerLog("infrastructure-yonder-ssh", 30))
	}
}

// nodeLabels returns the value of a label on the Node of every given Machine ("" when missing).
func nodeLabels(ctx context.Context, ms []clusterv1.Machine, key string) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range ms {
		n := &corev1.Node{}
		if err := st.WorkloadClient.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n); err != nil {
			return nil, err
		}
		out[n.Name] = n.Labels[key]
	}
	return out, nil
}

// testRollout changes the MachineDeployment's bootstrap template the way the CAPI book does it (a new
// YonderConfigTemplate with an extra node label, the MachineDeployment pointed at it): CAPI replaces every
// Machine, the new Nodes carry the label, and the old Machines' hosts are cleaned and recycled. Then the
// Cluster is deleted and every host must come back free and clean.
func testRollout(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	md := &clusterv1.MachineDeployment{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: quickCluster + "-md-0"}, md)).To(Succeed())
	old, err := machines(ctx, quickCluster)
	g.Expect(err).NotTo(HaveOccurred())

	tmpl := &bootstrapv1.YonderConfigTemplate{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: md.Spec.Template.Spec.Bootstrap.ConfigRef.Name}, tmpl)).To(Succeed())
	next := &bootstrapv1.YonderConfigTemplate{}
	next.Name, next.Namespace = tmpl.Name+"-v2", tmpl.Namespace
	next.Spec = *tmpl.Spec.DeepCopy()
	if next.Spec.Template.Spec.NodeLabels == nil {
		next.Spec.Template.Spec.NodeLabels = map[string]string{}
	}
	next.Spec.Template.Spec.NodeLabels["example.com/rollout"] = "two"
	g.Expect(st.Client.Create(ctx, next)).To(Succeed())
	p := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = next.Name
	g.Expect(st.Client.Patch(ctx, md, p)).To(Succeed())

	n := len(old)
	var last string
	err = stack.WaitFor(ctx, 10*time.Minute, func(ctx context.Context) (bool, error) {
		ms, err := machines(ctx, quickCluster)
		if err != nil {
			return false, err
		}
		nodes, err := readyNodes(ctx)
		if err != nil {
			return false, nil
		}
		fresh := 0
		for _, m := range ms {
			for _, o := range old {
				if o.Name == m.Name {
					last = fmt.Sprintf("old Machine %s still there", o.Name)
					return false, nil
				}
			}
			if m.Status.NodeRef.IsDefined() && m.Spec.ProviderID != "" && nodes[m.Status.NodeRef.Name] == m.Spec.ProviderID {
				fresh++
			}
		}
		last = fmt.Sprintf("%d new Machines with Ready Nodes of %d", fresh, len(ms))
		return fresh == n && len(ms) == n, nil
	})
	if err != nil {
		t.Fatalf("rollout did not finish: %s: %v\n%s", last, err, st.ManagerLog("cluster-api", 30))
	}
	ms, err := machines(ctx, quickCluster)
	g.Expect(err).NotTo(HaveOccurred())
	labels, err := nodeLabels(ctx, ms, "example.com/rollout")
	g.Expect(err).NotTo(HaveOccurred())
	for node, v := range labels {
		g.Expect(v).To(Equal("two"), "Node %s lacks the rolled-out label", node)
	}
	expectPodsAnswer(ctx, t, ms)
	waitReleased(ctx, t, usedHosts(ms), 3*time.Minute)
	t.Logf("rolled %d workers onto the new template (old hosts cleaned) in %s", n, time.Since(t0).Round(time.Second))

	t0 = time.Now()
	deleteCluster(ctx, t, quickCluster)
	t.Logf("Cluster deleted, every host released and clean, in %s", time.Since(t0).Round(time.Second))
}

// pause lets the fault-injection moment d pass (it is a chosen instant, not a wait for a condition);
// false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// chaosSeedEnv replays a chaos run: the seed every run logs, given back, draws the same kill moments.
const chaosSeedEnv = "YONDER_CHAOS_SEED"

// chaosSeed is the seed of this run's kill moments: chaosSeedEnv's when set, else a random one. It is
// logged, so a failure names the seed that replays it.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if v := os.Getenv(chaosSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: not an unsigned integer: %v", chaosSeedEnv, v, err)
		}
	}
	t.Logf("chaos seed %d (replay with %s=%d)", seed, chaosSeedEnv, seed)
	return seed
}

// chaos SIGKILLs every manager once at a moment within window drawn from rng and starts it again 1-3s
// later (also drawn), as a crashing Pod would be restarted; it logs the moments and returns when all are
// back.
func chaos(ctx context.Context, t *testing.T, rng *rand.Rand, window time.Duration) {
	t.Helper()
	type moment struct{ kill, down time.Duration }
	moments := map[string]moment{}
	var plan []string
	for _, name := range st.Managers() {
		m := moment{time.Duration(rng.Int64N(int64(window))), time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))}
		moments[name] = m
		plan = append(plan, fmt.Sprintf("%s killed at +%s, down %s", name, m.kill.Round(time.Millisecond), m.down.Round(time.Millisecond)))
	}
	t.Logf("chaos: %s", strings.Join(plan, "; "))
	var wg sync.WaitGroup
	errs := make(chan error, len(st.Managers()))
	for _, name := range st.Managers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !pause(ctx, moments[name].kill) {
				return
			}
			if err := st.KillManager(name); err != nil {
				errs <- err
				return
			}
			// Down even if the test ends meanwhile: a killed manager is always started again.
			_ = pause(context.WithoutCancel(ctx), moments[name].down)
			if err := st.StartManager(ctx, name); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// noLeakedClaims checks every claimed host's consumer exists and every YonderSSHMachine has one host.
func noLeakedClaims(ctx context.Context, t *testing.T) {
	t.Helper()
	c, err := claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ml := &infrav1.YonderSSHMachineList{}
	if err := st.Client.List(ctx, ml, client.InNamespace(st.HostNamespace)); err != nil {
		t.Fatal(err)
	}
	machines := map[string]int{}
	for _, m := range ml.Items {
		machines[m.Name] = 0
	}
	for h, consumer := range c {
		if consumer == "" {
			continue
		}
		if _, ok := machines[consumer]; !ok {
			t.Fatalf("host %s is claimed by YonderSSHMachine %s, which does not exist (leaked claim)", h, consumer)
		}
		machines[consumer]++
	}
	for m, n := range machines {
		if n != 1 {
			t.Fatalf("YonderSSHMachine %s holds %d hosts", m, n)
		}
	}
}

// testChaos scales 3 → 5 → 3 while every manager (CAPI, bootstrap, control plane, ssh) is killed with
// SIGKILL at a random moment of each step and restarted: everything converges and no claim leaks. The
// moments come from a logged seed (chaosSeedEnv replays them).
func testChaos(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	md := quickCluster + "-md-0"
	seed := chaosSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	for _, n := range []int{5, 3} {
		t0 := time.Now()
		scale(ctx, t, md, int32(n))
		chaos(ctx, t, rng, 15*time.Second)
		ms := waitWorkers(ctx, t, quickCluster, n, 8*time.Minute)
		waitReleased(ctx, t, usedHosts(ms), 3*time.Minute)
		noLeakedClaims(ctx, t)
		t.Logf("scaled to %d with every manager killed once, converged in %s", n, time.Since(t0).Round(time.Second))
	}
}
