package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/yonder-dev/yonder/hostruntime/internal/agent"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
	"github.com/yonder-dev/yonder/pkg/hostprep"
	"github.com/yonder-dev/yonder/pkg/nspawn"
	"github.com/yonder-dev/yonder/test/hosts"
)

// hostSysctls returns the current values of the sysctls the agent sets on the host.
func hostSysctls(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k := range hostprep.KubeletSysctls {
		v, err := hostprep.Sysctls{}.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// hostOwnSysctls returns the host's own values of those sysctls and the nodes holding them. Other test
// packages run agents on this host at the same time, so the current values may be another node's: the
// host's own are what the agents' shared registry recorded, and what the last reset on the host restores.
func hostOwnSysctls(t testing.TB) (map[string]string, []string) {
	t.Helper()
	values, holders, err := hostprep.Registry{}.HostValues(slices.Sorted(maps.Keys(hostprep.KubeletSysctls)))
	if err != nil {
		t.Fatal(err)
	}
	return values, holders
}

func status(t testing.TB, nd *node) *agent.Status {
	t.Helper()
	out, stderr, err := nd.agent(context.Background(), "status")
	if err != nil {
		t.Fatalf("status: %v: %s", err, stderr)
	}
	s := &agent.Status{}
	if err := json.Unmarshal([]byte(out), s); err != nil {
		t.Fatalf("status is not JSON: %v: %s", err, out)
	}
	return s
}

// The user story: a bare host in a network namespace runs `yonder-agent bootstrap` against a real
// control plane; the Node becomes Ready with the providerID and labels of the AgentConfig and runs a pod
// whose image came from a local OCI archive. Bootstrapping again changes nothing. Reset leaves the host as
// it was found: no machine, cgroup, mount, process or sysctl, and a snapshot of its network (links,
// addresses, routes, rules, neighbours, netfilter, sysctls) and files equal to the one taken before the
// bootstrap. Then the host is reused, as after a scale-down and up or a remediation: it becomes another
// Node with another pod CIDR, whose pod runs on the new pod network, and reset leaves it as found again.
func TestBootstrapMakesAReadyNodeThatRunsAPodAndResetLeavesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	before, _ := hostOwnSysctls(t)
	c := startCluster(t)
	h := c.newHost(t, "a")
	found := snapshotHost(t, h)
	nd := c.nodeOn(t, h, "a")

	start := time.Now()
	stdout, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), "bootstrap: %s\n%s", stdout, stderr)
	t.Logf("bootstrap to Node Ready: %s\n%s", time.Since(start), stderr)
	if os.Getenv("YONDER_AGENT_TEST_SAVE_LOGS") != "" {
		nd.saveLogs(t)
	}
	g.Expect(stderr).NotTo(ContainSubstring(strings.SplitN(nodeToken(t, nd), ".", 2)[1]), "the bootstrap token must never be logged")

	n, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Spec.ProviderID).To(Equal("yonder-ssh://default/" + nd.name))
	g.Expect(n.Labels).To(HaveKeyWithValue("yonder.dev/site", "lab"))
	g.Expect(n.Labels).To(HaveKeyWithValue("example.com/node", "a"))
	g.Expect(n.Spec.PodCIDR).NotTo(BeEmpty())
	g.Expect(nd.sentinel).To(BeAnExistingFile())

	// A pod with the locally imported image runs on the node, on the Node's pod network.
	p := c.runPod(t, helloPod("hello", nd.name), "a pod with the node's imported image starts")
	expectPodIPIn(t, p, n.Spec.PodCIDR)
	c.runPod(t, hostPathsPod(nd.name), "a pod with yonder-net-node's host paths starts")

	// status reports it all.
	s := status(t, nd)
	g.Expect(s.Bootstrapped).To(BeTrue())
	g.Expect(s.Machine.Running).To(BeTrue())
	g.Expect(s.Node).NotTo(BeNil())
	g.Expect(s.Node.Ready).To(BeTrue())
	for _, ph := range agent.Phases {
		g.Expect(s.Phases).To(HaveKey(ph))
		g.Expect(s.Phases[ph].Result).To(Equal("Succeeded"), ph)
	}
	c.expectBootstrapAgainChangesNothing(t, nd, n, s)

	// Reset leaves the host as it was found.
	start = time.Now()
	stdout, stderr, err = nd.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), "reset: %s\n%s", stdout, stderr)
	expectNothingLeft(t, nd, before)
	expectHostAsFound(t, h, found)
	t.Logf("reset and the comparison with the host as found: %s; reset removed: %s", time.Since(start), stdout)

	// The host is claimed again as another Node. The first Node still holds its pod CIDR (its Machine's
	// deletion has not removed it yet), so the new one gets another: the reported failure was a reused
	// host's cni0 still carrying the previous Node's gateway address, and no pod could start.
	start = time.Now()
	nd2 := c.nodeOn(t, h, "a2")
	stdout, stderr, err = nd2.agent(ctx, "bootstrap", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), "bootstrap of the reused host: %s\n%s", stdout, stderr)
	n2, err := c.admin.CoreV1().Nodes().Get(ctx, nd2.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready(n2)).To(BeTrue())
	g.Expect(n2.Spec.PodCIDR).NotTo(BeEmpty())
	g.Expect(n2.Spec.PodCIDR).NotTo(Equal(n.Spec.PodCIDR), "the reused host's Node must get another pod CIDR")
	p = c.runPod(t, helloPod("hello-again", nd2.name), "a pod starts on the reused host")
	expectPodIPIn(t, p, n2.Spec.PodCIDR)
	t.Logf("reused host: bootstrap to a running pod: %s", time.Since(start))

	start = time.Now()
	stdout, stderr, err = nd2.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), "reset: %s\n%s", stdout, stderr)
	expectNothingLeft(t, nd2, before)
	expectHostAsFound(t, h, found)
	// Reset again (a cleanup retried after a lost answer) finds nothing to do and changes nothing.
	stdout, stderr, err = nd2.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), "second reset: %s\n%s", stdout, stderr)
	expectHostAsFound(t, h, found)
	t.Logf("reused host: reset twice and the comparisons: %s", time.Since(start))
}

// expectHostAsFound requires h's state to equal found, listing every difference.
func expectHostAsFound(t testing.TB, h *hosts.Host, found hostState) {
	t.Helper()
	if d := found.diff(snapshotHost(t, h)); len(d) > 0 {
		t.Errorf("reset did not leave host %s as it was found:\n  %s", h.Name, strings.Join(d, "\n  "))
	}
}

// helloPod is a pod with the node's locally imported busybox image, pinned to nodeName.
func helloPod(name, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "hello", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "echo hello from $(hostname); exec sleep 3600"},
			}},
		},
	}
}

// expectPodIPIn requires the pod's IP to be in the Node's pod CIDR.
func expectPodIPIn(t testing.TB, p *corev1.Pod, podCIDR string) {
	t.Helper()
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		t.Fatalf("pod CIDR %q: %v", podCIDR, err)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !prefix.Contains(ip) {
		t.Fatalf("pod %s has IP %q, not in its Node's pod CIDR %s", p.Name, p.Status.PodIP, podCIDR)
	}
}

// runPod creates pod and waits until it runs; it returns the running pod.
func (c *cluster) runPod(t testing.TB, pod *corev1.Pod, why string) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	_, err := c.admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var p *corev1.Pod
	g.Eventually(func() corev1.PodPhase {
		p, err = c.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return p.Status.Phase
	}, 60*time.Second, 200*time.Millisecond).Should(Equal(corev1.PodRunning), why)
	return p
}

// hostPathsPod is a privileged pod with the host paths the network add-on's yonder-net-node mounts: the
// machine has /sys/fs/bpf (its /sys is a read-only tmpfs; the kubelet could not create the mount point),
// /lib/modules (the rootfs has none) and /dev/net/tun (embedded wireguard-go).
func hostPathsPod(nodeName string) *corev1.Pod {
	hp := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostpaths", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: nodeName, HostNetwork: true, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Volumes: []corev1.Volume{hp("bpffs", "/sys/fs/bpf", corev1.HostPathDirectoryOrCreate), hp("modules", "/lib/modules", corev1.HostPathDirectory),
				hp("tun", "/dev/net/tun", corev1.HostPathCharDev)},
			Containers: []corev1.Container{{
				Name: "net", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				Command: []string{"/bin/sh", "-c", "exec sleep 3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "bpffs", MountPath: "/sys/fs/bpf"}, {Name: "modules", MountPath: "/lib/modules", ReadOnly: true},
					{Name: "tun", MountPath: "/dev/net/tun"}},
			}},
		},
	}
}

// expectBootstrapAgainChangesNothing bootstraps nd again: same machine process (s is its status before),
// same Node n, no file rewritten, the pod "hello" never restarted.
func (c *cluster) expectBootstrapAgainChangesNothing(t testing.TB, nd *node, n *corev1.Node, s *agent.Status) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	kubeletConfig := filepath.Join(nd.stateDir, "machines", nd.machine, "var/lib/kubelet/config.yaml")
	mtime := fileMTime(t, kubeletConfig)
	stdout, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), "second bootstrap: %s\n%s", stdout, stderr)
	g.Expect(stderr).NotTo(ContainSubstring("Wrote machine files"))
	g.Expect(stderr).NotTo(ContainSubstring("Started machine"))
	g.Expect(status(t, nd).Machine.LauncherPID).To(Equal(s.Machine.LauncherPID))
	g.Expect(fileMTime(t, kubeletConfig)).To(Equal(mtime))
	n2, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n2.UID).To(Equal(n.UID))
	p2, err := c.admin.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p2.Status.ContainerStatuses[0].RestartCount).To(BeZero())
	expectOverlayRoot(t, nd)
}

// expectOverlayRoot checks the machine's root is the overlay docs/agent.md describes: the cached tree its
// only lower layer and left unwritten (the machine's files are in its own layer), containerd's images and
// snapshots in the bound directory beside it.
func expectOverlayRoot(t testing.TB, nd *node) {
	t.Helper()
	g := NewWithT(t)
	info, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	lower := rootfs.OverlayLowerDirs(string(info), filepath.Join(nd.stateDir, "machines"))
	g.Expect(lower).To(HaveLen(1), "one overlay root, on one tree")
	g.Expect(filepath.Dir(lower[0])).To(Equal(filepath.Join(nd.stateDir, "cache", "rootfs", "trees")))
	g.Expect(filepath.Join(lower[0], "var/lib/kubelet/config.yaml")).NotTo(BeAnExistingFile(), "the machine wrote into the shared tree")
	data := filepath.Join(nd.stateDir, "machines", nd.machine+".data")
	g.Expect(filepath.Join(data, "upper", "var/lib/kubelet/config.yaml")).To(BeAnExistingFile())
	snapshots, err := os.ReadDir(filepath.Join(data, "containerd", "io.containerd.snapshotter.v1.overlayfs", "snapshots"))
	g.Expect(err).NotTo(HaveOccurred(), "containerd's overlayfs snapshotter works in the bound directory")
	g.Expect(snapshots).NotTo(BeEmpty(), "the pod's image is unpacked there")
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func nodeToken(t testing.TB, nd *node) string {
	t.Helper()
	data, err := os.ReadFile(nd.config)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "bootstrapToken:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "bootstrapToken:"))
		}
	}
	t.Fatal("no bootstrapToken in the config")
	return ""
}

func fileMTime(t testing.TB, p string) time.Time {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.ModTime()
}

func expectNothingLeft(t testing.TB, nd *node, sysctls map[string]string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(nspawn.Config{Name: nd.machine}.Running()).To(BeZero(), "machine still running")
	cg := nspawn.Cgroups{Name: nd.machine}
	paths, err := cg.Paths()
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range paths {
		g.Expect(p).NotTo(BeAnExistingFile(), "cgroup left behind")
	}
	g.Expect(agent.MountsBelow(nd.host.Dir)).To(BeEmpty(), "mounts left behind")
	g.Expect(nd.stateDir).NotTo(BeAnExistingFile(), "state left behind")
	g.Expect(nd.sentinel).NotTo(BeAnExistingFile(), "sentinel left behind")
	own, holders := hostOwnSysctls(t)
	g.Expect(holders).NotTo(ContainElement(nd.machine), "the node still holds the host's sysctls")
	g.Expect(own).To(Equal(sysctls), "host sysctls not restored")
	if len(holders) == 0 {
		g.Expect(hostSysctls(t)).To(Equal(sysctls), "host sysctls not restored")
	}
	// No process of the machine survives anywhere on the host.
	g.Expect(processesMentioning(nd.stateDir)).To(BeEmpty())
}

func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, fmt.Sprintf("%s: %s", e.Name(), strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

func nspawnRunning(machine string) bool { return nspawn.Config{Name: machine}.Running() != 0 }
