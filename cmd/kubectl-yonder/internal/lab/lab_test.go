package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/testbins"
)

// snapshot is what `lab down` must leave as it found it: network namespaces, links in the root
// namespace, mounts of the root mount namespace, and processes.
type snapshot struct {
	netns  map[string]bool
	links  map[string]bool
	master map[string]string // link key → its bridge
	mounts map[string]bool
	procs  map[int]string // pid → "starttime cmdline" (the start time tells a reused pid apart)
}

func take(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{netns: map[string]bool{}, links: map[string]bool{}, master: map[string]string{}, mounts: map[string]bool{}, procs: map[int]string{}}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			// name@inode: a namespace of the same name made by another test is another namespace.
			var st syscall.Stat_t
			if err := syscall.Stat("/run/netns/"+f[0], &st); err == nil {
				s.netns[fmt.Sprintf("%s@%d", f[0], st.Ino)] = true
			}
		}
	}
	out, err = exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			// name@ifindex: indexes are not reused soon, so a link of the same name made later differs.
			k := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0] + "@" + strings.TrimSuffix(f[0], ":")
			s.links[k] = true
			for i := range f[:len(f)-1] {
				if f[i] == "master" {
					s.master[k] = f[i+1]
				}
			}
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("mountinfo: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		// mount point and source, without the ids that change with every remount.
		f := strings.Fields(sc.Text())
		if len(f) > 5 {
			s.mounts[f[4]+" "+f[len(f)-2]] = true
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		cmd, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 19 {
			s.procs[pid] = fields[19] + " " + strings.ReplaceAll(string(cmd), "\x00", " ")
		}
	}
	return s
}

// labnetName matches names of lab networks (namespaces, bridges, veths, their /run/netns mounts). Tests
// running at the same time create and remove those; the lab's own are checked by identity instead.
var labnetName = regexp.MustCompile(`(^|/run/netns/)(yh|ylab|yv|yp)\d+`)

// foreign says which objects to leave out of the before/after comparison: labnet objects the lab does not
// own (other tests' networks), and objects whose names do not look like anything the lab makes (other
// tests' namespaces, links and mounts) unless the lab owned them.
func foreign(owned map[string]bool, labLike *regexp.Regexp) func(string) bool {
	return func(k string) bool {
		if owned[k] {
			return false
		}
		return labnetName.MatchString(k) || !labLike.MatchString(k)
	}
}

func diff(before, after map[string]bool, ignore func(string) bool) (added, removed []string) {
	for k := range after {
		if !before[k] && !ignore(k) {
			added = append(added, k)
		}
	}
	for k := range before {
		if !after[k] && !ignore(k) {
			removed = append(removed, k)
		}
	}
	return added, removed
}

// The lab's promise: `lab down` removes every namespace, link, process and mount `lab up` created, and
// nothing else. The test builds the real plugin, brings a lab up (a host at each of four sites, two of
// them behind NAT gateways, the whole management stack), records what the lab owns, tears it down and
// compares the machine before and after.
func TestLabDownLeavesTheMachineAsItFoundIt(t *testing.T) {
	g := NewWithT(t)
	bin := gobuild.ForTest(t, "./cmd/kubectl-yonder", gobuild.Options{})
	lab := labUnderTest{bin: bin, dir: t.TempDir(), withCluster: os.Getenv("YONDER_LAB_TEST_NO_CLUSTER") == "", metal: os.Getenv("YONDER_LAB_TEST_METAL") != ""}
	bys := startBystanders(t)
	before := take(t)
	bys.find(t, before)
	st := lab.up(t)
	lab.expectStatus(t, st)
	t.Logf("Prometheus: every target up, every Node's network metrics present in %.1fs", lab.expectScraped(t, st).Seconds())
	if lab.withCluster {
		final := lab.remediateAndCheck(t, lab.rescaleAndCheck(t, st))
		t.Logf("Prometheus after the rescale and the remediation: the new Nodes scraped in %.1fs", lab.expectScraped(t, final).Seconds())
	}
	// After the scale and the remediation: the processes of the Nodes that joined on reused hosts are the
	// lab's too.
	during := take(t)
	ours, owned := lab.owns(t, st, before, during)
	down, err := exec.Command(bin, "lab", "down", "--dir", lab.dir).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(down))
	g.Expect(string(down)).To(ContainSubstring("lab removed"))
	lab.expectGone(t, before, take(t), bys, ours, owned)
}

// labUnderTest is the plugin binary and the lab directory of TestLabDownLeavesTheMachineAsItFoundIt, and
// what its lab runs.
type labUnderTest struct {
	bin, dir string
	// withCluster: a Cluster, Nodes, the network add-on and the pod check (YONDER_LAB_TEST_NO_CLUSTER=1
	// checks only the plumbing, 1-2 minutes instead of 5-8).
	withCluster bool
	// metal: a QEMU host, swtpm (once a Cluster claims it), its tap and the Redfish emulator
	// (YONDER_LAB_TEST_METAL=1).
	metal bool
}

// bystanders are a process, a namespace, a link and a mount the lab did not make: they must survive.
type bystanders struct {
	process          *exec.Cmd
	name             string
	netns, link, mnt string
}

func startBystanders(t *testing.T) *bystanders {
	t.Helper()
	g := NewWithT(t)
	// It sleeps until the test kills it: the lab test itself takes longer than any fixed time under load.
	b := &bystanders{process: exec.Command("sleep", "infinity"), name: fmt.Sprintf("ybys%d", os.Getpid()%100000)}
	g.Expect(b.process.Start()).To(Succeed())
	t.Cleanup(func() { _ = b.process.Process.Kill(); _ = b.process.Wait() })
	g.Expect(exec.Command("ip", "netns", "add", b.name).Run()).To(Succeed())
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", b.name).Run() })
	g.Expect(exec.Command("ip", "link", "add", b.name, "type", "bridge").Run()).To(Succeed())
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", b.name).Run() })
	mnt := t.TempDir()
	g.Expect(exec.Command("mount", "-t", "tmpfs", "ybystander", mnt).Run()).To(Succeed())
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	b.mnt = mnt + " ybystander"
	return b
}

// find records the bystanders' keys in the snapshot taken before the lab.
func (b *bystanders) find(t *testing.T, before snapshot) {
	t.Helper()
	g := NewWithT(t)
	for k := range before.netns {
		if strings.HasPrefix(k, b.name+"@") {
			b.netns = k
		}
	}
	for k := range before.links {
		if strings.HasPrefix(k, b.name+"@") {
			b.link = k
		}
	}
	g.Expect(before.mounts).To(HaveKey(b.mnt))
	g.Expect(b.netns).NotTo(BeEmpty())
	g.Expect(b.link).NotTo(BeEmpty())
}

// up runs `lab up` and checks its output: ready, the pod check across the three kinds of link.
func (l labUnderTest) up(t *testing.T) *State {
	t.Helper()
	g := NewWithT(t)
	args := []string{"lab", "up", "--dir", l.dir, "--hosts", "1", "--sites", "4"}
	if !l.withCluster {
		args = append(args, "--no-cluster")
	}
	if l.metal {
		args = append(args, "--metal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, l.bin, args...).CombinedOutput()
	t.Logf("lab up:\n%s", out)
	st, stErr := ReadState(l.dir)
	t.Cleanup(func() { _ = exec.Command(l.bin, "lab", "down", "--dir", l.dir).Run() })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stErr).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(ReadyMarker))
	if l.withCluster {
		expectPodCheck(g, string(out), st)
		g.Expect(st.PodCheck.Source).To(Equal(SourceUp))
		g.Expect(st.NATSites).To(Equal([]string{"site-c", "site-d"}), "lab up records the sites behind NAT")
	}
	if l.metal {
		g.Expect(st.Hosts).To(HaveLen(8), "a host per site, the other sites' gateways and the metal host")
	} else {
		g.Expect(st.Hosts).To(HaveLen(7), "a host per site and the other sites' gateways")
	}
	return st
}

// expectPodCheck: in the output of `lab up` or `lab check`, each pod's answer crossed to the other site
// over TCP, at the pod's address and through its ClusterIP Service (the workload cluster's kube-proxy on
// Yonder's nodes), with a 1 MiB download at each, pings came back, over the three kinds of link, each crossed both ways: Direct (site-a,
// site-b), NAT-initiated (site-a, site-c behind NAT) and relayed (site-c, site-d, both behind NAT) through
// the relay the controller chose (equal MTUs: the first by name); st is the state recorded afterwards.
func expectPodCheck(g Gomega, out string, st *State) {
	g.Expect(st.PodCheck).NotTo(BeNil())
	g.Expect(st.PodCheck.Error).To(BeEmpty())
	g.Expect(st.PodCheck.Pods).To(HaveKeyWithValue("site-a", "lab-net-site-a"))
	g.Expect(st.PodCheck.Pods).To(HaveKeyWithValue("site-b", "lab-net-site-b"))
	g.Expect(st.PodCheck.Nodes).To(HaveLen(4), "a check pod's Node at every site")
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-a \(site-a\) -> \S+:8080 \(site-b\) TCP: "hello from lab-net-site-b at site-b", /big: \d+ bytes`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-b \(site-b\) -> \S+:8080 \(site-a\) TCP: "hello from lab-net-site-a at site-a", /big: \d+ bytes`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-a \(site-a\) -> \S+ \(site-b\) ICMP: [1-3]/3 echo replies`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-b \(site-b\) -> \S+ \(site-a\) ICMP: [1-3]/3 echo replies`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-a \(site-a\) -> \S+:8080 \(site-b\) TCP: "hello from lab-net-site-b at site-b", /big: \d+ bytes \[Direct\]`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-c \(site-c\) -> \S+:8080 \(site-a\) TCP: "hello from lab-net-site-a at site-a", /big: \d+ bytes \[NATInitiated \(site-c behind NAT\)\]`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-a \(site-a\) -> \S+ \(site-c\) ICMP: [1-3]/3 echo replies \[NATInitiated`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-c \(site-c\) -> \S+:8080 \(site-d\) TCP: "hello from lab-net-site-d at site-d", /big: \d+ bytes \[Relayed via site-a\]`))
	g.Expect(out).To(MatchRegexp(`pod check: lab-net-site-d \(site-d\) -> \S+ \(site-c\) ICMP: [1-3]/3 echo replies \[Relayed via site-a\]`))
	for _, svc := range []string{
		`lab-net-site-a \(site-a\) -> Service lab-net-site-b 10\.96\.\d+\.\d+:8080 \(site-b\) TCP: "hello from lab-net-site-b at site-b", /big: \d+ bytes \[Direct\]`,
		`lab-net-site-b \(site-b\) -> Service lab-net-site-a 10\.96\.\d+\.\d+:8080 \(site-a\) TCP: "hello from lab-net-site-a at site-a", /big: \d+ bytes \[Direct\]`,
		`lab-net-site-c \(site-c\) -> Service lab-net-site-a 10\.96\.\d+\.\d+:8080 \(site-a\) TCP: "hello from lab-net-site-a at site-a", /big: \d+ bytes \[NATInitiated`,
		`lab-net-site-a \(site-a\) -> Service lab-net-site-c 10\.96\.\d+\.\d+:8080 \(site-c\) TCP: "hello from lab-net-site-c at site-c", /big: \d+ bytes \[NATInitiated`,
		`lab-net-site-c \(site-c\) -> Service lab-net-site-d 10\.96\.\d+\.\d+:8080 \(site-d\) TCP: "hello from lab-net-site-d at site-d", /big: \d+ bytes \[Relayed via site-a\]`,
		`lab-net-site-d \(site-d\) -> Service lab-net-site-c 10\.96\.\d+\.\d+:8080 \(site-c\) TCP: "hello from lab-net-site-c at site-c", /big: \d+ bytes \[Relayed via site-a\]`,
	} {
		g.Expect(out).To(MatchRegexp(`pod check: `+svc), "through the ClusterIP Service")
	}
	g.Expect(st.PodCheck.ServiceIPs).To(HaveLen(4))
	g.Expect(out).To(ContainSubstring("pod check passed"))
	g.Expect(st.PodCheck.Lines).To(HaveLen(18))
	for _, l := range st.PodCheck.Lines {
		g.Expect(out).To(ContainSubstring(l), "the recorded exchanges are the ones printed")
	}
}

// expectStatus: `lab status` shows the lab ready, its hosts and the network add-on's tunnels.
func (l labUnderTest) expectStatus(t *testing.T, st *State) {
	t.Helper()
	g := NewWithT(t)
	status, err := exec.Command(l.bin, "lab", "status", "--dir", l.dir).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(status))
	g.Expect(string(status)).To(ContainSubstring("Lab: ready"))
	g.Expect(string(status)).To(ContainSubstring(st.Hosts[2].Address))
	g.Expect(string(status)).To(ContainSubstring("Prometheus: "+st.Prometheus), "lab status says where Prometheus is")
	if l.metal {
		g.Expect(string(status)).To(ContainSubstring("BareMetalHosts: 1"))
	}
	if !l.withCluster {
		return
	}
	g.Expect(string(status)).To(ContainSubstring("Tunnels:"), "lab status shows the network add-on's tunnels")
	g.Expect(string(status)).To(MatchRegexp(`lab\s+Gateway\s+True`), "the SitePeering of the four sites is Ready")
	g.Expect(string(status)).To(MatchRegexp(`site-a<->site-b\s+Direct\s+-\s+-\s+WireGuard\s+\d+\s+true`))
	g.Expect(string(status)).To(MatchRegexp(`site-a<->site-c\s+NATInitiated\s+site-c\s+-\s+WireGuard\s+\d+\s+true`))
	g.Expect(string(status)).To(MatchRegexp(`site-c<->site-d\s+Relayed\s+site-c,site-d\s+site-a\s+WireGuard\s+\d+\s+true`))
	g.Expect(string(status)).To(MatchRegexp(`site-c\s+userspace\s+\S+\s+BehindNAT \(seen from 10\.250\.`), "a NATed Node detected it")
	g.Expect(string(status)).To(MatchRegexp(`site-b\s+userspace\s+\S+\s+Reachable`))
}

// rescaleAndCheck: the scale an operator does (`kubectl scale machinedeployment lab-md-0`) takes away
// site-c's check pod's Node (its Machine marked for deletion, 4 → 3 replicas) and puts a Node on the host
// it freed (3 → 4: with one host per site it is the only free one). `lab status` then says the recorded
// check is stale; `lab check` replaces the pod on the new Node, passes over the three kinds of link, and
// `lab status` reports its result. It returns the state `lab check` recorded.
func (l labUnderTest) rescaleAndCheck(t *testing.T, st *State) *State {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	mgmt, wl := labClients(g, st)
	const site = "site-c"
	oldNode := st.PodCheck.Nodes[site]
	victim := machineOf(g, mgmt, st, oldNode)
	patch := client.MergeFrom(victim.DeepCopy())
	if victim.Annotations == nil {
		victim.Annotations = map[string]string{}
	}
	victim.Annotations[clusterv1.DeleteMachineAnnotation] = "yes"
	g.Expect(mgmt.Patch(ctx, victim, patch)).To(Succeed())

	t0 := time.Now()
	scaleMachineDeployment(g, mgmt, st.Namespace, workerPool, 3)
	g.Eventually(func(g Gomega) {
		expectMachineGone(ctx, g, mgmt, victim)
		g.Expect(apierrors.IsNotFound(wl.Get(ctx, client.ObjectKey{Name: oldNode}, &corev1.Node{}))).To(BeTrue(), "Node %s deleted", oldNode)
	}).WithTimeout(machineDeletionTimeout).WithPolling(2 * time.Second).Should(Succeed())
	t.Logf("scaled %s to 3: Machine %s and Node %s gone in %.1fs", workerPool, victim.Name, oldNode, time.Since(t0).Seconds())
	expectGatewayStopped(t, st, site, oldNode)
	status := l.expectStale(g, st, site, regexp.QuoteMeta(st.PodCheck.Pods[site]+" is missing"))
	g.Expect(status).To(MatchRegexp(`lab-net-site-c\s+site-c\s+`+regexp.QuoteMeta(oldNode)+`\s+missing\s`), "the drain evicted site-c's check pod")

	t0 = time.Now()
	scaleMachineDeployment(g, mgmt, st.Namespace, workerPool, 4)
	newNode := waitForNodeOnHost(g, wl, mgmt, st, victim, site)
	t.Logf("scaled %s to 4: Node %s Ready on the reused host %s in %.1fs", workerPool, newNode, victim.Spec.ProviderID, time.Since(t0).Seconds())
	moved := l.checkMoved(t, st, site, newNode)
	expectGatewayElectedAgain(t, st, site)
	return moved
}

// remediateAndCheck: what the lab's next commands tell an operator to try (`kubectl --kubeconfig
// _lab/workload.kubeconfig delete node <node>`, then watch the MachineHealthCheck remediate), done with the
// real kubectl to the Node of site-d's check pod (site-d is behind NAT; its link to site-c is relayed). The
// MachineHealthCheck marks the Machine unhealthy (its Node was deleted), its MachineSet deletes it and
// creates a replacement, which claims the host the old one released — with one host per site, the same
// host — and joins as a new Node. `lab status` says the recorded check is stale; `lab check` replaces the
// pod on the new Node, passes over the three kinds of link with the other sites' pods where they were, and
// `lab status` reports its result. prev is the state of the previous `lab check`.
func (l labUnderTest) remediateAndCheck(t *testing.T, prev *State) *State {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	mgmt, wl := labClients(g, prev)
	const site = "site-d"
	oldNode := prev.PodCheck.Nodes[site]
	victim := machineOf(g, mgmt, prev, oldNode)
	kubectl, err := testbins.Path("kubectl")
	g.Expect(err).NotTo(HaveOccurred())

	t0 := time.Now()
	out, err := exec.Command(kubectl, "--kubeconfig", prev.WorkloadKubeconfig, "delete", "node", oldNode).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	t.Logf("kubectl delete node %s: %s", oldNode, strings.TrimSpace(string(out)))
	// Right away, before the pod garbage collector removes the orphaned pod: the record is stale.
	podName := regexp.QuoteMeta(prev.PodCheck.Pods[site])
	l.expectStale(g, prev, site, podName+`'s Node `+regexp.QuoteMeta(oldNode)+` is gone|`+podName+` is missing`)

	g.Eventually(func(g Gomega) {
		expectMachineGone(ctx, g, mgmt, victim)
	}).WithTimeout(machineDeletionTimeout).WithPolling(time.Second).Should(Succeed())
	gone := time.Since(t0)
	g.Eventually(func(g Gomega) {
		// The MachineHealthCheck, not anything else, took the Machine away: its event outlives the Machine.
		evs := &corev1.EventList{}
		g.Expect(mgmt.List(ctx, evs, client.InNamespace(prev.Namespace))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(
			HaveField("Reason", "MachineMarkedUnhealthy"),
			HaveField("InvolvedObject.Kind", "Machine"),
			HaveField("InvolvedObject.Name", victim.Name),
			HaveField("Message", HaveSuffix(" by "+prev.Namespace+"/"+workerPool)))), "the MachineHealthCheck %s marked Machine %s unhealthy", workerPool, victim.Name)
	}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	newNode := waitForNodeOnHost(g, wl, mgmt, prev, victim, site)
	t.Logf("remediation: Node %s deleted; Machine %s marked unhealthy by the MachineHealthCheck and gone in %.1fs; its replacement's Node %s Ready on the same host %s in %.1fs",
		oldNode, victim.Name, gone.Seconds(), newNode, victim.Spec.ProviderID, time.Since(t0).Seconds())
	return l.checkMoved(t, prev, site, newNode)
}

// workerPool is the lab's MachineDeployment of SSH workers (the MachineHealthCheck's selection).
const workerPool = ClusterName + "-md-0"

// labClients returns clients of the lab's management and workload clusters.
func labClients(g Gomega, st *State) (mgmt, wl client.Client) {
	mgmt, err := clientFor(st.ManagementKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	wl, err = clientFor(st.WorkloadKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	return mgmt, wl
}

// machineOf returns the Machine of workerPool whose Node is node.
// machineDeletionTimeout bounds a worker Machine's deletion (drain, the host's reset over SSH, release).
// It takes well under a minute on a quiet machine; go test runs other suites beside this one, and the
// bound only has to catch a deletion that is stuck.
const machineDeletionTimeout = 10 * time.Minute

// expectMachineGone fails while the Machine exists, saying why it is still there: CAPI's Deleting
// condition reports the drain (pods it waits for) and the infrastructure's deletion.
func expectMachineGone(ctx context.Context, g Gomega, mgmt client.Client, victim *clusterv1.Machine) {
	m := &clusterv1.Machine{}
	err := mgmt.Get(ctx, client.ObjectKeyFromObject(victim), m)
	if apierrors.IsNotFound(err) {
		return
	}
	g.Expect(err).NotTo(HaveOccurred())
	var why []string
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineDeletingCondition || c.Type == clusterv1.MachineInfrastructureReadyCondition || c.Type == clusterv1.MachineNodeHealthyCondition {
			why = append(why, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Machine %s still exists (phase %s, deleting since %v): %s",
		m.Name, m.Status.Phase, m.DeletionTimestamp, strings.Join(why, "; "))
}

func machineOf(g Gomega, mgmt client.Client, st *State, node string) *clusterv1.Machine {
	ms := &clusterv1.MachineList{}
	g.Expect(mgmt.List(context.Background(), ms, client.InNamespace(st.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName})).To(Succeed())
	var m *clusterv1.Machine
	for i := range ms.Items {
		if ms.Items[i].Status.NodeRef.Name == node {
			m = &ms.Items[i]
		}
	}
	g.Expect(m).NotTo(BeNil(), "the Machine of Node %s", node)
	g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.MachineDeploymentNameLabel, workerPool))
	return m
}

// waitForNodeOnHost waits until workerPool has its four Machines again, one of them — not old — on old's
// host (its providerID) with a Ready Node labelled with site, and returns that Node's name.
func waitForNodeOnHost(g Gomega, wl, mgmt client.Client, st *State, old *clusterv1.Machine, site string) string {
	ctx := context.Background()
	var newNode string
	g.Eventually(func(g Gomega) {
		ms := &clusterv1.MachineList{}
		g.Expect(mgmt.List(ctx, ms, client.InNamespace(st.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: workerPool})).To(Succeed())
		g.Expect(ms.Items).To(HaveLen(4))
		newNode = ""
		for _, m := range ms.Items {
			if m.Name != old.Name && m.Spec.ProviderID == old.Spec.ProviderID {
				newNode = m.Status.NodeRef.Name
			}
		}
		g.Expect(newNode).NotTo(BeEmpty(), "a Machine on the reused host %s has a Node", old.Spec.ProviderID)
		n := &corev1.Node{}
		g.Expect(wl.Get(ctx, client.ObjectKey{Name: newNode}, n)).To(Succeed())
		g.Expect(nodeReady(n)).To(BeTrue(), "Node %s Ready", newNode)
		g.Expect(n.Labels).To(HaveKeyWithValue(SiteLabel, site))
	}).WithTimeout(10 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	g.Expect(newNode).NotTo(Equal(old.Status.NodeRef.Name))
	return newNode
}

// expectStale: `lab status` still shows the recorded check st (passed, by the command that ran it) and
// says it is stale for a reason about site's check pod that matches reason; it returns the status output.
func (l labUnderTest) expectStale(g Gomega, st *State, site, reason string) string {
	out, err := exec.Command(l.bin, "lab", "status", "--dir", l.dir).CombinedOutput()
	status := string(out)
	g.Expect(err).NotTo(HaveOccurred(), status)
	g.Expect(status).To(ContainSubstring("Pod check: passed at "))
	g.Expect(status).To(MatchRegexp(`\(` + regexp.QuoteMeta(st.PodCheck.Source) + `, \d+[hms0-9]* ago\)`))
	g.Expect(status).To(MatchRegexp("The stored result is stale \\([^\n]*("+reason+")[^\n]*\\): run `kubectl yonder lab check`"), "site %s's check pod", site)
	return status
}

// checkMoved runs `lab check` after site's check pod lost its Node (prev: the state recorded before) and
// expects it to pass over the three kinds of link with site's pod on newNode and every other site's pod
// on the Node it had, and `lab status` to report that result, not stale. It returns the recorded state.
func (l labUnderTest) checkMoved(t *testing.T, prev *State, site, newNode string) *State {
	t.Helper()
	g := NewWithT(t)
	t0 := time.Now()
	check, err := exec.Command(l.bin, "lab", "check", "--dir", l.dir).CombinedOutput()
	t.Logf("lab check (%.1fs):\n%s", time.Since(t0).Seconds(), check)
	g.Expect(err).NotTo(HaveOccurred())
	after, err := ReadState(l.dir)
	g.Expect(err).NotTo(HaveOccurred())
	expectPodCheck(g, string(check), after)
	g.Expect(after.PodCheck.Source).To(Equal(SourceCheck))
	g.Expect(after.PodCheck.At).To(BeTemporally(">", prev.PodCheck.At))
	g.Expect(after.PodCheck.Nodes).To(HaveKeyWithValue(site, newNode), "%s's check pod runs on the new Node on the reused host", site)
	for s, n := range prev.PodCheck.Nodes {
		if s != site {
			g.Expect(after.PodCheck.Nodes).To(HaveKeyWithValue(s, n), "the check pod at %s stays on its Node", s)
		}
	}
	out, err := exec.Command(l.bin, "lab", "status", "--dir", l.dir).CombinedOutput()
	status := string(out)
	g.Expect(err).NotTo(HaveOccurred(), status)
	g.Expect(status).To(MatchRegexp(regexp.QuoteMeta(after.PodCheck.Pods[site]) + `\s+` + site + `\s+` + regexp.QuoteMeta(newNode) + `\s+Running\s+` + regexp.QuoteMeta(after.PodCheck.IPs[site]) + `\s+Ready`))
	g.Expect(status).To(MatchRegexp(`Pod check: passed at \S+ \(lab check, \d+[hms0-9]* ago\)`))
	g.Expect(status).To(ContainSubstring(after.PodCheck.Lines[len(after.PodCheck.Lines)-1]))
	g.Expect(status).NotTo(ContainSubstring("stale"))
	return after
}

// scaleMachineDeployment sets the replicas of MachineDeployment name, as `kubectl scale` does.
func scaleMachineDeployment(g Gomega, c client.Client, namespace, name string, replicas int32) {
	md := &clusterv1.MachineDeployment{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, md)).To(Succeed())
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = &replicas
	g.Expect(c.Patch(context.Background(), md, patch)).To(Succeed())
}

// owns returns what the lab owns, by identity: its processes (pid → snapshot entry) — those it started or
// that run in its hosts' namespaces — and its namespaces (named after its slot or holding one of its
// processes), links (named after its slot or enslaved to its bridge) and mounts (of those namespaces or
// under its directory).
func (l labUnderTest) owns(t *testing.T, st *State, before, during snapshot) (map[int]string, map[string]bool) {
	t.Helper()
	g := NewWithT(t)
	var slots []string
	for _, b := range st.Bridges {
		slots = append(slots, strings.TrimPrefix(b, "ylab"))
	}
	g.Expect(slots).To(HaveLen(4), "every site but the first has its own bridge")
	slotAlt := strings.Join(slots, "|")
	ours := map[int]string{}
	for pid, p := range during.procs {
		if before.procs[pid] == p {
			continue
		}
		if pid == st.PID || strings.Contains(p, l.dir) || regexp.MustCompile(`10\.250\.(`+slotAlt+`)\.`).MatchString(p) {
			ours[pid] = p
		}
	}
	g.Expect(len(ours)).To(BeNumerically(">=", 5), "supervisor, etcd and apiserver ×2, managers, sshd: %v", ours)
	ourNetns := labNetns(t, ours, before, during, slotAlt)
	netDaemons := 0
	for pid, p := range during.procs {
		var pst syscall.Stat_t
		if before.procs[pid] == p || syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &pst) != nil || !ourNetns[pst.Ino] {
			continue
		}
		ours[pid] = p
		if strings.Contains(p, " /yonder-net-node ") {
			netDaemons++
		}
	}
	if l.withCluster {
		g.Expect(netDaemons).To(Equal(4), "a yonder-net-node per Node, in its host's namespace: %v", ours)
	}
	ownName := regexp.MustCompile(`(^|/run/netns/)(yh|ylab|yv|yp)(` + slotAlt + `)(\D|$)`)
	owned := map[string]bool{}
	ownedNS := map[string]bool{}
	for k := range during.netns {
		name, ino, _ := strings.Cut(k, "@")
		n, _ := strconv.ParseUint(ino, 10, 64)
		if !before.netns[k] && (ownName.MatchString(name) || ourNetns[n]) {
			owned[k], ownedNS[name] = true, true
		}
	}
	for k := range during.links {
		if !before.links[k] && (ownName.MatchString(k) || slices.Contains(st.Bridges, during.master[k])) {
			owned[k] = true
		}
	}
	for k := range during.mounts {
		mp := strings.Fields(k)[0]
		if !before.mounts[k] && (ownedNS[strings.TrimPrefix(mp, "/run/netns/")] || strings.Contains(k, l.dir)) {
			owned[k] = true
		}
	}
	var ownedNames []string
	for k := range owned {
		ownedNames = append(ownedNames, strings.SplitN(k, "@", 2)[0])
	}
	g.Expect(ownedNames).To(ContainElements("yh"+slots[0]+"-site-a-0", "yh"+slots[0]+"-site-b-gw", "yh"+slots[1]+"-site-b-0",
		"yh"+slots[0]+"-site-c-gw", "yh"+slots[2]+"-site-c-0", "yh"+slots[0]+"-site-d-gw", "yh"+slots[3]+"-site-d-0", st.Bridges[0], st.Bridges[3]),
		"the lab's hosts are namespaces on its bridges, with a gateway (routing or NAT) to every other site")
	return ours, owned
}

// labNetns returns the network namespaces (inodes) of the lab's processes ours and of its hosts'
// namespaces (named after its slots): everything running in them is the lab's too — sshd, the nspawn
// machines with containerd, kubelet and the pods, among them yonder-net-node (whose wireguard-go device
// lives as long as the process).
func labNetns(t *testing.T, ours map[int]string, before, during snapshot, slotAlt string) map[uint64]bool {
	t.Helper()
	ourNetns := map[uint64]bool{}
	for pid := range ours {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err == nil {
			ourNetns[st.Ino] = true
		}
	}
	var rootNetns syscall.Stat_t
	NewWithT(t).Expect(syscall.Stat("/proc/self/ns/net", &rootNetns)).To(Succeed())
	delete(ourNetns, rootNetns.Ino)
	for k := range during.netns {
		var nst syscall.Stat_t
		if !before.netns[k] && syscall.Stat("/run/netns/"+strings.SplitN(k, "@", 2)[0], &nst) == nil &&
			regexp.MustCompile(`^(yh|ylab|yv|yp)(`+slotAlt+`)(\D|$)`).MatchString(k) {
			ourNetns[nst.Ino] = true
		}
	}
	return ourNetns
}

// expectGone: nothing the lab owned is left, and nothing that looks like the lab's appeared or vanished
// otherwise. (Other engineers' tests create and remove their own namespaces at the same time: a strict diff
// of the whole machine would flag them; the bystanders check "nothing else" for real objects.)
func (l labUnderTest) expectGone(t *testing.T, before, after snapshot, bys *bystanders, ours map[int]string, owned map[string]bool) {
	t.Helper()
	g := NewWithT(t)
	// yonder-*: the network daemons' devices (yonder-wg, yonder-vx, yonder-vw) belong in the hosts'
	// namespaces; one appearing in the root namespace is a leak.
	ignore := foreign(owned, regexp.MustCompile(regexp.QuoteMeta(l.dir)+`|^ylab|^(yv|yp)\d|^yonder-`))
	for name, pair := range map[string][2]map[string]bool{
		"network namespaces": {before.netns, after.netns},
		"links":              {before.links, after.links},
		"mounts":             {before.mounts, after.mounts},
	} {
		added, removed := diff(pair[0], pair[1], ignore)
		g.Expect(added).To(BeEmpty(), "%s that look like the lab's and appeared", name)
		g.Expect(removed).To(BeEmpty(), "%s that existed before the lab and are gone", name)
	}
	for _, k := range []string{bys.netns, bys.link} {
		g.Expect(after.netns[k] || after.links[k]).To(BeTrue(), "bystander %s survives", k)
	}
	g.Expect(after.mounts).To(HaveKey(bys.mnt), "bystander mount survives")
	for k := range owned {
		g.Expect(after.netns[k] || after.links[k] || after.mounts[k]).To(BeFalse(), "%s of the lab is still there", k)
	}
	var left []string
	for pid, p := range ours {
		if after.procs[pid] == p {
			left = append(left, fmt.Sprintf("%d %s", pid, p))
		}
	}
	g.Expect(left).To(BeEmpty(), "processes of the lab still running")
	g.Expect(after.procs).To(HaveKeyWithValue(bys.process.Process.Pid, before.procs[bys.process.Process.Pid]), "a process the lab did not start survives")
	_, err := os.Stat(StatePath(l.dir))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no state is left")
	g.Expect(exec.Command(l.bin, "lab", "status", "--dir", l.dir).Run()).NotTo(Succeed(), "status says no lab runs")
}

func TestOptionsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Dir: "d", HostsPerSite: 0, Sites: 2}, "--hosts"},
		{Options{Dir: "d", HostsPerSite: 1, Sites: 5}, "--sites"},
		{Options{Dir: "d", HostsPerSite: 1, Sites: 2, Workers: 3}, "--workers"},
	} {
		g := NewWithT(t)
		g.Expect(tc.o.validate()).To(MatchError(ContainSubstring(tc.want)))
	}
	g := NewWithT(t)
	g.Expect((&Options{Dir: "d", HostsPerSite: 2, Sites: 2}).validate()).To(Succeed())
	g.Expect((&Options{Dir: "d", HostsPerSite: 1, Sites: 1, Metal: true}).validate()).To(Succeed())
	g.Expect((&Options{Metal: true}).args()).To(ContainElement("--metal"), "the supervisor gets --metal")
}
