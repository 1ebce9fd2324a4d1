package metal

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/kubeadm"
	"github.com/yonder-dev/yonder/test/stack"
)

// kubeadmImageName is the kubeadm node image's file name under the boot server's /artifacts/.
const kubeadmImageName = "debian-kubeadm.qcow2"

// The CABPK × YonderMetalMachine cell of docs/compatibility.md, with the real peers, as a CAPM3 user runs
// it: an existing cluster made by the real `kubeadm init` on a full-OS host is attached with
// YonderControlPlane, and the metal-kubeadm flavor's worker claims the stack's BareMetalHost — the one
// TestMetalClusterctlLifecycle returned to the pool, wiped. The host is provisioned with the image a CAPM3
// user gets from image-builder (test/kubeadm.NodeImage: Debian's cloud image with cloud-init, containerd,
// runc, the CNI plugins, kubeadm and a kubelet unit), served with its sha256 beside the stack's own: it
// PXE-boots, attests, the image is written with a config drive holding CABPK's cloud-config, and the host
// boots its disk. The image's own cloud-init runs CABPK's data, whose real `kubeadm join` makes the Node:
// Ready through its kubelet with the Machine's providerID (from the config drive's meta-data, as the
// flavor's preKubeadmCommands read it) and the pool's label, running a pod. Scaling to 0 drains and deletes
// the Node and deprovisions the host: one more PXE boot wipes its disk, and it is off and available again.
func TestKubeadmWorkersOnMetal(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hs := st.MetalHosts()
	g.Expect(hs).To(HaveLen(1))
	l := &metalLife{ctx: ctx, host: hs[0], name: "kmetal", imageName: kubeadmImageName}
	// The lifecycle leaves the host available; if it failed half-way, its Cluster still holds the host.
	deleteIfLeft(ctx, t, "edge")
	t0 := time.Now()

	img, err := kubeadm.NodeImage(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	imageEnv, err := st.ServeMetalImage(kubeadmImageName, img)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubeadm node image: %d MiB raw, %d MiB qcow2 (%s)", img.RawSize>>20, img.QCOW2Size>>20, time.Since(t0).Round(time.Second))

	// The existing cluster: kubeadm init on a full-OS host of the lab network, which the metal host's
	// disk-booted OS reaches.
	cps, err := hosts.StartFullOS(ctx, st.Net, "kmcp", 1, hosts.FullOSOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cps[0].Stop() })
	kc, err := kubeadm.Init(ctx, cps[0])
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubeadm init on %s: %s", cps[0].Name, time.Since(t0).Round(time.Second))
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(kc.AdminKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	if l.workload, err = client.New(restCfg, client.Options{}); err != nil {
		t.Fatal(err)
	}

	// What the operator provides, as docs/compatibility.md says: the cluster's admin kubeconfig for
	// YonderControlPlane and the cluster CA for CABPK (<cluster>-ca), in the hosts' namespace.
	ns := st.HostNamespace
	for _, s := range kc.AttachSecrets(ns, l.name, l.name+"-admin") {
		g.Expect(st.Client.Create(ctx, s)).To(Succeed())
		t.Cleanup(func() { _ = st.Client.Delete(context.Background(), s) })
	}
	out, err := st.Clusterctl(ctx, append(imageEnv, "YONDER_CONTROL_PLANE_KUBECONFIG_SECRET="+l.name+"-admin"),
		"generate", "cluster", l.name, "--infrastructure", "yonder-metal:v0.1.0", "--flavor", "metal-kubeadm",
		"--kubernetes-version", kubeadm.Version, "--target-namespace", ns, "--worker-machine-count", "1")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode([]byte(out))
	g.Expect(err).NotTo(HaveOccurred())
	pxeBoots := st.MetalPXEBoots(l.host.Name)
	applied := time.Now()
	for _, o := range objs {
		g.Expect(st.Client.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	t.Cleanup(func() { deleteIfLeft(context.Background(), t, l.name) })

	claimed, poweredOn, provisioned := l.provisioned(t, applied, pxeBoots+1)
	node := l.kubeadmNodeReady(t)
	ready := time.Since(applied)
	l.runPod(t, node)
	podRan := time.Since(applied)

	t1 := time.Now()
	l.scale(t, 0)
	l.expectReleased(t, pxeBoots+2)
	released := time.Since(t1)
	t.Logf("phases: Cluster applied → host claimed %s → VM on %s → Machine Provisioned (PXE, attested, kubeadm image written) %s → Node Ready (disk boot, cloud-init, kubeadm join) %s → pod Running %s; scale to 0 → Node deleted, disk wiped, host off and available %s; test %s",
		claimed.Round(time.Millisecond), poweredOn.Round(time.Millisecond), provisioned.Round(time.Millisecond), ready.Round(time.Millisecond),
		podRan.Round(time.Millisecond), released.Round(time.Millisecond), time.Since(t0).Round(time.Second))
}

// kubeadmNodeReady waits until the Machine's Node, joined by kubeadm under the image's cloud-init, is Ready
// in the kubeadm cluster with the Machine's providerID and the flavor's pool label; it returns its name.
func (l *metalLife) kubeadmNodeReady(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	var node string
	// The disk boot and cloud-init's kubeadm join run under TCG: minutes.
	g.Eventually(func(g Gomega) {
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		m := ms[0]
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "the Machine has no Node yet")
		n := &corev1.Node{}
		g.Expect(l.workload.Get(l.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n)).To(Succeed())
		g.Expect(n.Spec.ProviderID).To(Equal(m.Spec.ProviderID))
		g.Expect(n.Labels).To(HaveKeyWithValue("yonder.dev/pool", "md-0"), "the flavor's kubeletExtraArgs")
		g.Expect(n.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
		// The kubelet has no --node-ip: it reports an address of the interface of the default route the
		// metal manager's DHCP server gave the host (YONDER_BOOT_ROUTER), which a host without one lacks.
		g.Expect(n.Status.Addresses).To(ContainElement(HaveField("Type", corev1.NodeInternalIP)), "the kubelet found the host's address")
		node = n.Name
	}, 20*time.Minute, 2*time.Second).Should(Succeed(), func() string {
		return l.diag() + "\nCABPK log:\n" + st.ManagerLog("bootstrap-kubeadm", 30)
	})
	g.Expect(l.bmh(g).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	return node
}

// runPod runs a pod on the Node (bound to it, past the scheduler) with the image the node image preloads,
// and waits until its kubelet reports it Running.
func (l *metalLife) runPod(t *testing.T, node string) {
	t.Helper()
	g := NewWithT(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-" + node, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "pause", Image: hosts.FullOSSandboxImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	// The apiserver's default ServiceAccount may not exist yet in a cluster this young.
	g.Eventually(func() error { return l.workload.Create(l.ctx, pod) }, time.Minute, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) corev1.PodPhase {
		p := &corev1.Pod{}
		g.Expect(l.workload.Get(l.ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		return p.Status.Phase
	}, 5*time.Minute, time.Second).Should(Equal(corev1.PodRunning), l.diag)
}

// deleteIfLeft deletes Cluster name of the hosts' namespace if it exists and waits until it is gone, so its
// host is back in the pool.
func deleteIfLeft(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: st.HostNamespace, Name: name}}
	if err := st.Client.Delete(ctx, c); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Errorf("failed to delete Cluster %s: %v", name, err)
		return
	}
	if err := stack.WaitFor(ctx, 12*time.Minute, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(st.Client.Get(ctx, client.ObjectKeyFromObject(c), &clusterv1.Cluster{})), nil
	}); err != nil {
		t.Errorf("Cluster %s was not deleted: %v", name, fmt.Errorf("%w\n%s", err, st.ManagerLog("infrastructure-yonder-metal", 30)))
	}
}
