// Package metal is the bare-metal scenario of the end-to-end suite: the management stack of test/stack
// with the metal provider installed by the real `clusterctl init` (its boot services configured through
// its clusterctl variables) and one QEMU host behind the Redfish emulator, registered as a BareMetalHost;
// a Cluster from `clusterctl generate cluster --flavor metal`. It has its own stack (not test/e2e's):
// the metal provider's boot services own the lab bridge's DHCP/TFTP ports, which a second management
// cluster (TestMove) could not share.
package metal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"

	"github.com/yonder-dev/yonder/test/docpage"
	"github.com/yonder-dev/yonder/test/imagewrite"
	"github.com/yonder-dev/yonder/test/stack"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stack.RunTests(m, stack.Options{
		MetalHosts: 1,
		// The host gets a disk and the cloud OS image is served beside the boot artifacts: the metal
		// flavor writes it to the disk and the host becomes a Node.
		MetalDiskImage: true,
		// ClusterClass support, as the quick start documents (TestMetalFlavors creates a metal-clusterclass Cluster).
		ClusterTopology: true,
		// CAPI's kubeadm providers beside ours: TestMetalFlavors dry-runs metal-kubeadm through CABPK's webhooks and
		// TestKubeadmWorkersOnMetal joins a host with CABPK's data.
		KubeadmProviders: true,
		// The real Prometheus scrapes every manager: TestMetalClusterctlLifecycle asserts through PromQL.
		Prometheus: true,
	}, func(s *stack.Stack) { st = s }))
}

// The bare-metal life through clusterctl, as a CAPM3 user lives it: docs/quickstart.md's bare-metal path
// run as written (apply: its `clusterctl generate cluster edge --flavor metal | kubectl apply` with a disk
// image, a Debian cloud image with cloud-init, test/osimage, served over HTTP as qcow2 with its sha256) → the YonderMetalMachine claims the stack's BareMetalHost, its VM PXE-boots
// through the metal manager's DHCP/TFTP/HTTP on the lab bridge, the ramdisk's yonder-agent attests with
// the VM's TPM and receives its instructions, writes the image to the VM's disk with a config drive
// holding the Machine's bootstrap data, and the host boots its disk. The image's own cloud-init runs
// YonderConfig's data, and the host's inventory record (its BareMetalHost's networkData and metaData
// Secrets, written by the operator before any Machine existed) on the same config drive: cloud-init keeps
// DHCP on the boot NIC, adds the networkData's static address and sets the metaData's hostname (checked on
// the host's serial console). The user data installs yonder-agent from the registry, the agent (with systemd as PID 1) starts
// containerd and the kubelet in a systemd-nspawn machine, and the Node is Ready in the workload cluster
// with the Machine's providerID; the Machine carries the host's address, and a pod runs on the Node and
// answers over the pod network. Then the host hangs (its VM stopped): the Node goes NotReady, the flavor's
// MachineHealthCheck creates a YonderMetalRemediation from the flavor's template, the host is
// power-cycled through its BMC, boots its disk again, the node's boot unit brings the kubelet back and the
// same Machine's Node is Ready again — no PXE boot, no replacement. The metal manager killed and restarted
// then changes nothing (no second PXE boot). Scaling to 0 drains and deletes the Node and deprovisions the host:
// its ramdisk PXE-boots once more and wipes the disk (automatedCleaningMode metadata: no partition table
// or signature left on the disk file), the VM is off and the host available with no consumer. The
// MachineDeployment then rolls to a diskless YonderMetalMachineTemplate (customDeploy yonder-diskless, as
// docs/infrastructure-baremetal.md shows it) and scales back to 1: a new Machine reuses the host as the pool
// returned it — a third PXE boot, the TPM enrolment of the first boot still pinned — and its ramdisk runs
// the bootstrap data itself: the inventory record's static address and hostname applied (its console says
// so), the agent installed from the registry, the node image unpacked into memory, a Ready Node with the
// same providerID that runs a pod, and nothing written to the disk. Deleting the Cluster while that Machine
// runs deprovisions the host with no cleaning boot: off, available, its disk still the wiped one.
//
// Prometheus (Debian's, scraping every manager as the shipped metrics-reader role allows) sees it all:
// every manager up; the claim, the provisioning phase, DHCP, TFTP, boot HTTP and attestation counted; the
// claimed-host gauge 1 while the host is provisioned and 0 after the release; and no secret the scenario
// handled (BMC password, bootstrap token, SSH key, kubeconfig credentials) in any label value it holds.
// Wall time of each phase is logged, and the host's image write rate next to `qemu-img convert` and `dd` of
// the same image file in the same run (test/imagewrite; logged, not asserted).
func TestMetalClusterctlLifecycle(t *testing.T) {
	g := NewWithT(t)
	hosts := st.MetalHosts()
	g.Expect(hosts).To(HaveLen(1))
	// The Cluster's name is the quick start's, whose metal section apply runs.
	l := &metalLife{ctx: context.Background(), host: hosts[0], name: "edge"}
	metrics := expectEveryTargetUp(t)
	inv := l.describeHost(t)
	t0 := l.apply(t)
	claimed, poweredOn, provisioned := l.provisioned(t, t0, 1)
	hostWrite := l.imageWritten(t)
	metrics.expectProvisioningCounted(t)
	metrics.collectSecrets(t, l.host)
	nodeReady, podRan := l.nodeReady(t, t0)
	inv.expectApplied(t, l)
	first := l.machines(NewWithT(t))[0]
	enrolment := l.bmh(NewWithT(t)).Annotations[tpmEnrolment]
	rebooted := l.remediatedByReboot(t)
	l.restartChangesNothing(t)
	released := l.scaleToZero(t)
	metrics.expectReleaseCounted(t)
	// The host went back to the pool wiped: a later Machine reuses it, from its third PXE boot to a Node —
	// diskless this time: the MachineDeployment rolled to a template with customDeploy yonder-diskless.
	l.goDiskless(t)
	t1 := time.Now()
	l.scale(t, 1)
	// Before the host is provisioned: a diskless host reports only once its Node joined, which consumes
	// the bootstrap token.
	metrics.collectSecrets(t, l.host)
	_, _, reprovisioned := l.provisioned(t, t1, 3)
	reusedReady, reusedPodRan := l.nodeReady(t, t1)
	inv.expectAppliedDiskless(t, l)
	l.expectReused(t, first, enrolment)
	deleted := l.deleteCluster(t)
	writeRate := imageWriteBaselines(t, hostWrite)
	t.Logf("phases: generated Cluster applied → host claimed %s → VM on %s → Machine Provisioned (PXE, attested, image written, disk boot requested) %s → Node Ready (disk boot, cloud-init, agent, kubelet) %s → a pod ran and answered %s; host hung → Node NotReady → remediated by a power cycle → the same Node Ready again %s; scale to 0 → Node and Machine gone, disk wiped, VM off, host available %s; scale to 1, diskless → the same host Provisioned for a new Machine (PXE, attested, the ramdisk ran the agent and the Node joined) %s → Node Ready %s → its pod answered %s; Cluster deleted → host off and available, its disk untouched %s",
		claimed.Round(time.Millisecond), poweredOn.Round(time.Millisecond), provisioned.Round(time.Millisecond), nodeReady.Round(time.Millisecond),
		podRan.Round(time.Millisecond), rebooted.Round(time.Millisecond), released.Round(time.Millisecond),
		reprovisioned.Round(time.Millisecond), reusedReady.Round(time.Millisecond), reusedPodRan.Round(time.Millisecond), deleted.Round(time.Millisecond))
	t.Log(writeRate)
	metrics.expectNoSecretInLabels(t)
}

// imageWritten reads the host's image write from its ramdisk's report, which the BareMetalHost keeps until
// the host is released: the image's raw size and how long the ramdisk took.
func (l *metalLife) imageWritten(t *testing.T) imagewrite.Rate {
	t.Helper()
	g := NewWithT(t)
	r, rep, err := imagewrite.HostRate(l.bmh(g))
	g.Expect(err).NotTo(HaveOccurred(), l.diag)
	t.Logf("the ramdisk's report: %s (%d bytes to %s in %s)", rep.Message, rep.Bytes, rep.Device, rep.Duration)
	return r
}

// imageWriteBaselines writes the image the host wrote — the very file the boot server serves — with
// qemu-img convert and dd in a directory of the stack's, on the served file's filesystem. It runs once the
// host is off, so the tools neither slow a timed phase nor are slowed by the VM's emulation. It returns the
// line that puts the three rates side by side.
func imageWriteBaselines(t *testing.T, host imagewrite.Rate) string {
	t.Helper()
	g := NewWithT(t)
	img := st.MetalImagePath()
	g.Expect(img).NotTo(BeEmpty(), "the stack serves the cloud OS image")
	b, err := imagewrite.Measure(context.Background(), img, st.Dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Convert.Bytes).To(Equal(host.Bytes), "qemu-img's raw form is as long as what the host wrote: the same image")
	g.Expect(b.DD.Bytes).To(Equal(host.Bytes))
	return imagewrite.Line(host, b)
}

// metalLife is TestMetalClusterctlLifecycle's Cluster name on the stack's one metal host.
type metalLife struct {
	ctx  context.Context
	host *stack.MetalHost
	name string
	// diskless is set once the MachineDeployment rolled to the diskless template (goDiskless).
	diskless bool
	// imageName is the disk image the Cluster's hosts are provisioned with, under the boot server's
	// /artifacts/ ("": the stack's own, stack.MetalImageName).
	imageName string
	// workload is the Cluster's workload cluster (nil: the stack's, st.WorkloadClient).
	workload client.Client
}

// image is the file name of the disk image the Cluster's hosts are provisioned with.
func (l *metalLife) image() string {
	if l.imageName != "" {
		return l.imageName
	}
	return stack.MetalImageName
}

// workloadClient is the client of the Cluster's workload cluster.
func (l *metalLife) workloadClient() client.Client {
	if l.workload != nil {
		return l.workload
	}
	return st.WorkloadClient
}

// goDiskless rolls the MachineDeployment to diskless hosts as a user rolls out any template change: a
// copy of its YonderMetalMachineTemplate with customDeploy yonder-diskless instead of the image, and the
// MachineDeployment's infrastructureRef pointed at it (docs/infrastructure-baremetal.md, diskless hosts).
func (l *metalLife) goDiskless(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	md := &clusterv1.MachineDeployment{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.name + "-md-0"}, md)).To(Succeed())
	cur := &infrav1.YonderMetalMachineTemplate{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, cur)).To(Succeed())
	d := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: cur.Namespace, Name: cur.Name + "-diskless", Labels: cur.Labels}}
	cur.Spec.DeepCopyInto(&d.Spec)
	d.Spec.Template.Spec.Image = nil
	d.Spec.Template.Spec.CustomDeploy = &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}
	g.Expect(st.Client.Create(l.ctx, d)).To(Succeed())
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.InfrastructureRef.Name = d.Name
	g.Expect(st.Client.Patch(l.ctx, md, patch)).To(Succeed())
	l.diskless = true
}

func (l *metalLife) bmh(g Gomega) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.host.Name}, h)).To(Succeed())
	return h
}

func (l *metalLife) machines(g Gomega) []clusterv1.Machine {
	ms := &clusterv1.MachineList{}
	g.Expect(st.Client.List(l.ctx, ms, client.InNamespace(st.HostNamespace), client.MatchingLabels{clusterv1.ClusterNameLabel: l.name})).To(Succeed())
	return ms.Items
}

// diag is what a failure shows: the metal manager's log and the VM's console.
func (l *metalLife) diag() string {
	return fmt.Sprintf("metal manager log:\n%s\nVM console:\n%s", st.ManagerLog("infrastructure-yonder-metal", 40), tail(st.MetalConsole(l.host.Name), 8000))
}

// quickstartPage is the page whose bare-metal path apply follows as written.
const quickstartPage = "docs/quickstart.md"

// apply follows docs/quickstart.md's bare-metal path as written (test/docpage), from the repository root:
// step 1 (`make release-manifests`, `make push` into the stack's registry), the first block of step 3 (the
// registry's CA and the existing cluster's kubeconfig as Secrets) and the metal section's `clusterctl
// generate cluster edge --flavor metal | kubectl apply`, with only variables the page documents: the
// stack's management cluster, its registry and that registry's CA, the workload cluster's kubeconfig, the
// cloud OS image the stack serves with its sha256 (format qcow2 and cleaning mode metadata are the
// flavor's defaults), the registries the stack's registry mirrors, and the health check's timeout (60 s:
// a hung host is remediated a minute after its Node stops being Ready) and ceiling (100 %: one worker is
// 100 % of the pool). It returns when the Cluster was applied.
func (l *metalLife) apply(t *testing.T) time.Time {
	t.Helper()
	g := NewWithT(t)
	page, err := docpage.Read(quickstartPage)
	g.Expect(err).NotTo(HaveOccurred())
	var blocks []string
	for _, want := range []struct {
		heading string
		block   int
	}{
		{"1. Build the local repository and push the images", 0},
		{"3. Register the registry's CA, the existing control plane and the hosts", 0},
		{"Bare-metal workers instead (metal flavors)", 0},
	} {
		s, err := page.Section(want.heading)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(len(s.Blocks)).To(BeNumerically(">", want.block), "%s: section %q has no block %d", quickstartPage, want.heading, want.block)
		blocks = append(blocks, s.Blocks[want.block])
	}
	files := t.TempDir()
	caFile, kubeconfigFile := filepath.Join(files, "registry-ca.crt"), filepath.Join(files, "existing-cluster.kubeconfig")
	g.Expect(os.WriteFile(caFile, st.Registry.CACertPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(kubeconfigFile, st.Workload.AdminKubeconfig, 0o600)).To(Succeed())
	vars := map[string]string{
		"KUBECONFIG": st.Management.AdminKubeconfigPath, "REGISTRY": st.ImageRepository(), "REGISTRY_CA": caFile,
		"EXISTING_KUBECONFIG": kubeconfigFile, "YONDER_UNHEALTHY_TIMEOUT_SECONDS": "60", "YONDER_REMEDIATION_MAX_UNHEALTHY": "100%",
	}
	stackEnv := map[string]string{}
	for _, kv := range append(st.MetalImageEnv(), st.TemplateEnv()...) {
		k, v, _ := strings.Cut(kv, "=")
		stackEnv[k] = v
	}
	for _, k := range []string{"YONDER_METAL_IMAGE_URL", "YONDER_METAL_IMAGE_CHECKSUM", "YONDER_REGISTRY_MIRROR_OF"} {
		g.Expect(stackEnv).To(HaveKey(k))
		vars[k] = stackEnv[k]
	}
	sh := docpage.NewShell(t, page, vars)
	sh.RunBlock(l.ctx, t, blocks[0], nil)
	sh.RunBlock(l.ctx, t, blocks[1], nil)
	t0 := time.Now()
	sh.RunBlock(l.ctx, t, blocks[2], nil)
	return t0
}

// provisioned waits until the host is claimed, the VM on and the Machine Provisioned with the metal
// providerID — the TPM pinned, the image written after one more PXE boot (the host's pxeBoots-th) and the
// disk boot requested; it returns when each happened after t0.
func (l *metalLife) provisioned(t *testing.T, t0 time.Time, pxeBoots int) (claimed, poweredOn, provisioned time.Duration) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) string {
		c := l.bmh(g).Spec.ConsumerRef
		g.Expect(c).NotTo(BeNil())
		return c.Kind
	}, 3*time.Minute, time.Second).Should(Equal("YonderMetalMachine"), l.diag)
	claimed = time.Since(t0)
	g.Eventually(func() bool { return st.MetalRunning(l.host.Name) }, 2*time.Minute, 200*time.Millisecond).Should(BeTrue(), "the BMC powered the VM on")
	poweredOn = time.Since(t0)
	// Generous: TCG writes and boots the 1.5 GiB image in ~2½ min on a quiet machine, 4× that under load.
	g.Eventually(func(g Gomega) string {
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		return ms[0].Status.Phase
	}, 20*time.Minute, time.Second).Should(Or(Equal(string(clusterv1.MachinePhaseProvisioned)), Equal(string(clusterv1.MachinePhaseRunning))), l.diag)
	provisioned = time.Since(t0)
	m := l.machines(g)[0]
	g.Expect(m.Spec.ProviderID).To(Equal(fmt.Sprintf("yonder-metal://%s/%s", st.HostNamespace, l.host.Name)))
	h := l.bmh(g)
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	if l.diskless {
		g.Expect(h.Status.Provisioning.CustomDeploy).To(HaveField("Method", infrav1.DisklessDeployMethod))
		g.Expect(h.Status.Provisioning.Image.URL).To(BeEmpty(), "nothing written")
	} else {
		g.Expect(h.Status.Provisioning.Image.URL).To(HaveSuffix("/" + l.image()))
	}
	g.Expect(h.Annotations).To(HaveKey(tpmEnrolment), "the VM's TPM was pinned at its first attested boot")
	g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(pxeBoots), "one PXE boot to provision, then the disk (or nothing more: diskless)")
	g.Expect(st.MetalRunning(l.host.Name)).To(BeTrue(), "the host runs its image")
	return claimed, poweredOn, provisioned
}

// nodeReady waits until the Machine's Node is Ready in the workload cluster with the Machine's
// providerID and the Machine carries the host's address, then runs a pod on the Node that answers over the
// pod network; it returns when the Node was Ready and when the pod had answered, after t0.
func (l *metalLife) nodeReady(t *testing.T, t0 time.Time) (ready, podRan time.Duration) {
	t.Helper()
	g := NewWithT(t)
	var m clusterv1.Machine
	// The disk boot, cloud-init, the agent's downloads and the node's systemd, containerd and kubelet all
	// run under TCG: minutes.
	g.Eventually(func(g Gomega) {
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		m = ms[0]
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "the Machine has no Node yet")
		n := &corev1.Node{}
		g.Expect(st.WorkloadClient.Get(l.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n)).To(Succeed())
		g.Expect(n.Spec.ProviderID).To(Equal(m.Spec.ProviderID))
		g.Expect(n.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
	}, 25*time.Minute, 2*time.Second).Should(Succeed(), func() string { return l.diag() + "\n" + l.nodeDiag() })
	ready = time.Since(t0)
	g.Expect(m.Status.Addresses).To(ContainElement(HaveField("Address", l.host.BootAddress.String())), "the Machine carries the host's address")
	n := &corev1.Node{}
	g.Expect(st.WorkloadClient.Get(l.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n)).To(Succeed())
	g.Expect(n.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: l.host.BootAddress.String()}),
		"the kubelet runs on the host's disk-booted OS (or its ramdisk, diskless), at the address it leased")

	cs, err := kubernetes.NewForConfig(st.Workload.Config)
	g.Expect(err).NotTo(HaveOccurred())
	name := "answer-" + m.Name
	answer := "hello from " + name
	server := stack.AnswerPod(name, n.Name, answer, nil)
	g.Expect(stack.StartAnswerPod(l.ctx, st.WorkloadClient, server)).To(Succeed())
	defer func() { _ = st.WorkloadClient.Delete(context.WithoutCancel(l.ctx), server) }()
	ip, err := stack.WaitPodIP(l.ctx, st.WorkloadClient, name, 10*time.Minute)
	g.Expect(err).NotTo(HaveOccurred(), l.nodeDiag)
	out, err := stack.FetchAnswer(l.ctx, st.WorkloadClient, cs, name+"-client", n.Name, stack.Fetch{IP: ip}, nil, 10*time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	_, resp, _ := strings.Cut(out, "TCP response:\n")
	g.Expect(strings.Split(resp, "\n")).To(ContainElement(answer), "the client pod on the metal Node fetched the answer over the pod network: %s", out)
	return ready, time.Since(t0)
}

// remediatedByReboot hangs the host and waits until the flavor's MachineHealthCheck and
// YonderMetalRemediationTemplate have brought the same Machine's Node back by a power cycle; it returns how
// long that took.
func (l *metalLife) remediatedByReboot(t *testing.T) time.Duration {
	t.Helper()
	g := NewWithT(t)
	m0 := l.machines(g)[0]
	node := m0.Status.NodeRef.Name
	t1 := time.Now()
	g.Expect(st.FreezeMetal(l.host.Name)).To(Succeed())
	ready := func(g Gomega) corev1.NodeCondition {
		n := &corev1.Node{}
		g.Expect(st.WorkloadClient.Get(l.ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c
			}
		}
		return corev1.NodeCondition{}
	}
	g.Eventually(func(g Gomega) corev1.ConditionStatus { return ready(g).Status }, 3*time.Minute, 2*time.Second).
		ShouldNot(Equal(corev1.ConditionTrue), "the hung host's Node is no longer Ready")
	g.Eventually(func(g Gomega) []infrav1.YonderMetalRemediation {
		rs := &infrav1.YonderMetalRemediationList{}
		g.Expect(st.Client.List(l.ctx, rs, client.InNamespace(st.HostNamespace))).To(Succeed())
		return rs.Items
	}, 5*time.Minute, 2*time.Second).ShouldNot(BeEmpty(), "the MachineHealthCheck created a remediation from the flavor's template")
	g.Eventually(func(g Gomega) {
		c := ready(g)
		g.Expect(c.Status).To(Equal(corev1.ConditionTrue))
		g.Expect(c.LastHeartbeatTime.Time).To(BeTemporally(">", t1), "a heartbeat of the kubelet started after the power cycle")
	}, 15*time.Minute, 2*time.Second).Should(Succeed(), func() string { return l.diag() + "\n" + l.nodeDiag() })
	rebooted := time.Since(t1)
	ms := l.machines(g)
	g.Expect(ms).To(HaveLen(1))
	g.Expect(ms[0].Name).To(Equal(m0.Name), "rebooted, not replaced")
	g.Expect(ms[0].Spec.ProviderID).To(Equal(m0.Spec.ProviderID))
	g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(1), "the host booted its disk again, no provisioning boot")
	g.Eventually(func(g Gomega) []infrav1.YonderMetalRemediation {
		rs := &infrav1.YonderMetalRemediationList{}
		g.Expect(st.Client.List(l.ctx, rs, client.InNamespace(st.HostNamespace))).To(Succeed())
		return rs.Items
	}, 3*time.Minute, 2*time.Second).Should(BeEmpty(), "the MachineHealthCheck deleted the remediation once the Node was healthy")
	return rebooted
}

// nodeDiag is what the host's console and the workload cluster say about the metal Node.
func (l *metalLife) nodeDiag() string {
	nodes := &corev1.NodeList{}
	_ = st.WorkloadClient.List(l.ctx, nodes)
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	return fmt.Sprintf("workload Nodes: %v", names)
}

// restartChangesNothing kills (-9) and restarts the manager on a provisioned host: it rebuilds its boot
// services and state from the objects and leaves the host alone — no second power cycle, still
// provisioned.
func (l *metalLife) restartChangesNothing(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(st.KillManager("infrastructure-yonder-metal")).To(Succeed())
	g.Expect(st.StartManager(l.ctx, "infrastructure-yonder-metal")).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(l.bmh(g).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(1))
		g.Expect(st.MetalRunning(l.host.Name)).To(BeTrue())
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)))
	}, 10*time.Second, time.Second).Should(Succeed(), l.diag)
}

// scaleToZero scales the MachineDeployment to 0 and waits until the Machine and its Node are gone and the
// host deprovisioned — its disk cleaned by one more PXE boot — available and off; it returns how long that took.
func (l *metalLife) scaleToZero(t *testing.T) time.Duration {
	t.Helper()
	t1 := time.Now()
	l.scale(t, 0)
	l.expectReleased(t, 2)
	return time.Since(t1)
}

// scale sets the MachineDeployment's replicas, as `kubectl scale` does.
func (l *metalLife) scale(t *testing.T, replicas int32) {
	t.Helper()
	g := NewWithT(t)
	md := &clusterv1.MachineDeployment{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.name + "-md-0"}, md)).To(Succeed())
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = &replicas
	g.Expect(st.Client.Patch(l.ctx, md, patch)).To(Succeed())
}

// expectReleased waits until the Cluster has no Machine left and the host is deprovisioned — available,
// no consumer, off — after its pxeBoots-th PXE boot, the cleaning one; then it checks that CAPI deleted
// the metal Node and that the cleaning left no partition table, boot code or signature on the disk file.
func (l *metalLife) expectReleased(t *testing.T, pxeBoots int) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		g.Expect(l.machines(g)).To(BeEmpty())
		h := l.bmh(g)
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
		g.Expect(h.Status.PoweredOn).To(BeFalse())
	}, 12*time.Minute, time.Second).Should(Succeed(), l.diag)
	g.Eventually(func() bool { return st.MetalRunning(l.host.Name) }, time.Minute, 200*time.Millisecond).Should(BeFalse(), "the VM was powered off")
	nodes := &corev1.NodeList{}
	g.Expect(l.workloadClient().List(l.ctx, nodes)).To(Succeed())
	for _, n := range nodes.Items {
		g.Expect(n.Spec.ProviderID).NotTo(HavePrefix("yonder-metal://"), "CAPI deleted the metal Node %s", n.Name)
	}
	g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(pxeBoots), "one cleaning boot (none after a diskless Machine)")
	disk := st.MetalDisk(l.host.Name)
	f, err := os.Open(disk)
	g.Expect(err).NotTo(HaveOccurred())
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(f, head)
	_ = f.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Count(head, []byte{0})).To(Equal(len(head)), "the partition table and boot code are gone")
	out, err := exec.CommandContext(l.ctx, "blkid", "-p", disk).CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "blkid finds no signature on the released host's disk: %s", out)
}

// expectReused checks the Machine that scaling back to 1 made after the release: a new Machine on the
// same host (the only one), whose TPM enrolment the release kept — what CAPM3 users expect of a host that
// went back to the pool.
func (l *metalLife) expectReused(t *testing.T, first clusterv1.Machine, enrolment string) {
	t.Helper()
	g := NewWithT(t)
	ms := l.machines(g)
	g.Expect(ms).To(HaveLen(1))
	g.Expect(ms[0].Name).NotTo(Equal(first.Name), "a new Machine")
	g.Expect(ms[0].Spec.ProviderID).To(Equal(first.Spec.ProviderID), "on the same host")
	g.Expect(l.bmh(g).Annotations).To(HaveKeyWithValue(tpmEnrolment, enrolment), "the host kept the TPM pinned at its first boot: a release returns it to the pool as it was")
}

// tpmEnrolment is the BareMetalHost annotation that pins the host's TPM (its EK) at the first attested boot.
const tpmEnrolment = "metal.yonder.dev/tpm-enrolment"

// deleteCluster deletes the Cluster as users do while its Machine runs a Node: CAPI deletes the Machine,
// the host is deprovisioned and stays, available. A diskless Machine wrote nothing, so no cleaning boot
// follows: the host is powered off, and its disk is still the one the scale to 0 wiped.
func (l *metalLife) deleteCluster(t *testing.T) time.Duration {
	t.Helper()
	g := NewWithT(t)
	t1 := time.Now()
	cl := &clusterv1.Cluster{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.name}, cl)).To(Succeed())
	g.Expect(st.Client.Delete(l.ctx, cl)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(st.Client.Get(l.ctx, client.ObjectKeyFromObject(cl), &clusterv1.Cluster{}))
	}, 12*time.Minute, time.Second).Should(BeTrue(), l.diag)
	boots := 4
	if l.diskless {
		boots = 3
	}
	l.expectReleased(t, boots)
	return time.Since(t1)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
