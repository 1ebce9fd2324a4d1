package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/haproxy"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/kubeadm"
)

// controlPlaneHostLabel marks the YonderSSHHosts the ssh-kubeadm-cluster flavor's control plane claims.
const controlPlaneHostLabel = "ssh.yonder.dev/control-plane"

var kcpGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"}

// Scenario 2 of docs/compatibility.md, with the real peers: a whole cluster from the SSH inventory. The
// ssh-kubeadm-cluster flavor's KubeadmControlPlane (CAPI's KCP) makes the control plane on a YonderSSHHost
// labelled as control-plane-capable, behind the endpoint the operator provides in YonderSSHCluster: HAProxy
// in front of those hosts' API servers, configured as kubeadm's high-availability guide does. CABPK joins a
// worker on another host. Every Node is Ready with its Machine's providerID and runs a pod. A KCP rollout
// then replaces the control-plane Machine on the free control-plane host (`kubeadm join --control-plane`,
// etcd member added, then the old one removed), through the same endpoint, and releases and cleans the old
// host.
func testKubeadmClusterOnSSHHosts(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	ns := flavorcheck.Namespace(ctx, t, st.Client, "kcp")
	const name = "kcp"

	// The inventory: two control-plane-capable hosts (one for the control plane, one free for KCP to roll
	// onto) and a worker host.
	hs, key := startKubeadmHosts(ctx, t, "kcp", 3)
	cpHosts, worker := hs[:2], hs[2]
	// The Nodes the cluster has once settled: one control plane and one worker, one control-plane host free.
	nodes := len(hs) - 1
	for _, h := range hs {
		// What the hosts would pull from registry.k8s.io: the pause image, and the control plane's images
		// where a control plane may run.
		g.Expect(kubeadm.LoadImages(ctx, h, h != worker)).To(Succeed())
	}

	// The endpoint the operator provides: a load balancer in front of the control-plane hosts.
	var backends []string
	for _, h := range cpHosts {
		backends = append(backends, h.Address.String()+":6443")
	}
	lb, err := haproxy.Start(ctx, haproxy.Options{Host: st.Net.Gateway.String(), Backends: backends})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = lb.Stop() })

	registerKubeadmHosts(ctx, t, ns, key, hs, func(h *hosts.Host) map[string]string {
		if h == worker {
			return nil
		}
		return map[string]string{controlPlaneHostLabel: "true"}
	})

	// The flavor, with the variables the docs name.
	env := []string{"CONTROL_PLANE_ENDPOINT_HOST=" + lb.Host, "CONTROL_PLANE_ENDPOINT_PORT=" + strconv.Itoa(lb.Port),
		"YONDER_KUBEADM_IGNORE_PREFLIGHT_ERRORS=[" + strings.Join(kubeadm.IgnoredPreflightErrors(), ",") + "]"}
	out, err := st.Clusterctl(ctx, env, "generate", "cluster", name, "--infrastructure", "yonder-ssh:v0.1.0",
		"--flavor", "ssh-kubeadm-cluster", "--kubernetes-version", kubeadm.Version, "--target-namespace", ns,
		"--control-plane-machine-count", "1", "--worker-machine-count", "1")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode([]byte(out))
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GroupVersionKind() == kcpGVK {
			// What this site's operator adds to the KubeadmControlPlane, as docs/compatibility.md says: the etcd
			// image its hosts carry, and no kube-proxy or CoreDNS (their images cannot be reached from here;
			// each host has a pod network of its own, and nothing here uses Services).
			g.Expect(unstructured.SetNestedField(o.Object, kubeadm.EtcdImageTag,
				"spec", "kubeadmConfigSpec", "clusterConfiguration", "etcd", "local", "imageTag")).To(Succeed())
			g.Expect(unstructured.SetNestedStringSlice(o.Object, []string{"addon/kube-proxy", "addon/coredns"},
				"spec", "kubeadmConfigSpec", "initConfiguration", "skipPhases")).To(Succeed())
			// `kubeadm join --control-plane` pulls every image of the cluster's configuration first, those two
			// included: its ImagePull check is skipped, the images the control plane runs are on the hosts.
			path := []string{"spec", "kubeadmConfigSpec", "joinConfiguration", "nodeRegistration", "ignorePreflightErrors"}
			ignored, _, _ := unstructured.NestedStringSlice(o.Object, path...) // null (the flavor's default): none
			g.Expect(unstructured.SetNestedStringSlice(o.Object, append(ignored, "ImagePull"), path...)).To(Succeed())
		}
		g.Expect(st.Client.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	t.Cleanup(func() { deleteKubeadmCluster(context.Background(), t, ns, name, hs) })

	// KCP writes the cluster's kubeconfig, whose server is the load balancer.
	kubeconfig := &corev1.Secret{}
	g.Eventually(func() error {
		return st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-kubeconfig"}, kubeconfig)
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restCfg.Host).To(Equal("https://" + lb.Address()))
	wl, err := kubernetes.NewForConfig(restCfg)
	g.Expect(err).NotTo(HaveOccurred())

	joined := waitKubeadmWorkers(ctx, t, wl, ns, name, nodes)
	t.Logf("control plane initialized by KCP and a worker joined, all Ready: %s after the start", time.Since(t0).Round(time.Second))
	runPodsOn(ctx, t, wl, joined)
	first := controlPlaneMachine(ctx, g, ns, name)
	firstHost := hostOf(first.Spec.ProviderID)
	g.Expect(firstHost).To(BeElementOf(cpHosts[0].Name, cpHosts[1].Name))

	// A rollout replaces the control-plane Machine on the free control-plane host.
	tr := time.Now()
	kcp := &unstructured.Unstructured{}
	kcp.SetGroupVersionKind(kcpGVK)
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-control-plane"}, kcp)).To(Succeed())
	patch := client.MergeFrom(kcp.DeepCopy())
	g.Expect(unstructured.SetNestedField(kcp.Object, time.Now().UTC().Format(time.RFC3339), "spec", "rollout", "after")).To(Succeed())
	g.Expect(st.Client.Patch(ctx, kcp, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var names []string
		for _, m := range controlPlaneMachines(ctx, g, ns, name) {
			names = append(names, m.Name)
		}
		g.Expect(names).To(ContainElement(Not(Equal(first.Name))), "KCP creates the replacement")
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	// Back to one control-plane Machine and one worker, both Ready: the old Machine is gone.
	joined = waitKubeadmWorkers(ctx, t, wl, ns, name, nodes)
	second := controlPlaneMachine(ctx, g, ns, name)
	secondHost := hostOf(second.Spec.ProviderID)
	g.Expect(secondHost).NotTo(Equal(firstHost))
	g.Expect(secondHost).To(BeElementOf(cpHosts[0].Name, cpHosts[1].Name))
	t.Logf("KCP rollout onto %s: %s", secondHost, time.Since(tr).Round(time.Second))
	runPodsOn(ctx, t, wl, joined)

	// The old control-plane host is released, cleaned by kubeadm reset, and free again.
	var old *hosts.Host
	for _, h := range cpHosts {
		if h.Name == firstHost {
			old = h
		}
	}
	g.Eventually(func(g Gomega) {
		host := &infrav1.YonderSSHHost{}
		g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: old.Name}, host)).To(Succeed())
		g.Expect(host.Status.Phase).To(Equal(infrav1.HostPhaseAvailable))
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	out, err = old.Output(ctx, "ls /etc/kubernetes/manifests 2>/dev/null; for f in /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/pki/ca.key "+
		"/var/lib/etcd/member /etc/default/kubelet /run/cluster-api/bootstrap-success.complete; do test -e $f && echo $f; done; true")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(out)).To(BeEmpty(), "left on %s after its release", old.Name)
	t.Logf("scenario kubeadm cluster (KCP init, a worker, a control-plane rollout) took %s", time.Since(t0).Round(time.Second))
}

// controlPlaneMachines returns Cluster ns/cluster's control-plane Machines that are not being deleted.
func controlPlaneMachines(ctx context.Context, g Gomega, ns, cluster string) []clusterv1.Machine {
	ms, err := machinesIn(ctx, ns, cluster)
	g.Expect(err).NotTo(HaveOccurred())
	var cp []clusterv1.Machine
	for _, m := range ms {
		if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok && m.DeletionTimestamp.IsZero() {
			cp = append(cp, m)
		}
	}
	return cp
}

// controlPlaneMachine returns Cluster ns/cluster's one control-plane Machine.
func controlPlaneMachine(ctx context.Context, g Gomega, ns, cluster string) clusterv1.Machine {
	cp := controlPlaneMachines(ctx, g, ns, cluster)
	g.Expect(cp).To(HaveLen(1))
	return cp[0]
}
