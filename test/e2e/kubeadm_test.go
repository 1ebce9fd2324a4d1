package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/kubeadm"
	"github.com/yonder-dev/yonder/test/stack"
)

// kubeadmCleanup is what the operator registers as the hosts' cleanup (docs/compatibility.md): kubeadm's own
// reset, and the kubelet flags the bootstrap data wrote.
var kubeadmCleanup = []string{"kubeadm reset --force", "rm -f /etc/default/kubelet"}

// Scenario 1 of docs/compatibility.md, with the real peers: an existing cluster made by `kubeadm init` on a
// full-OS host is attached with YonderControlPlane; the ssh-kubeadm flavor's workers get CABPK's bootstrap
// data, which the SSH provider runs on full-OS YonderSSHHosts, where the real `kubeadm join` makes them
// Nodes. Every worker Node is Ready through its kubelet and runs a pod. Scaling down releases and cleans the
// hosts (the hosts' cleanup commands: kubeadm reset); scaling up claims the same hosts again and joins them
// again.
func testKubeadmWorkersOnSSHHosts(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	// A namespace of its own: its hosts have kubeadm, the other scenarios' hosts run yonder-agent, and a
	// Machine claims only hosts of its Cluster's namespace.
	ns := flavorcheck.Namespace(ctx, t, st.Client, "kubeadm")
	const name = "kadm"

	// The existing cluster: kubeadm init on a full-OS host.
	hs, key := startKubeadmHosts(ctx, t, "kadm", 3)
	cp, workers := hs[0], hs[1:]
	kc, err := kubeadm.Init(ctx, cp)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubeadm init on %s: %s", cp.Name, time.Since(t0).Round(time.Second))
	for _, h := range workers {
		// What the hosts would pull from registry.k8s.io: the pause image.
		g.Expect(kubeadm.LoadImages(ctx, h, false)).To(Succeed())
	}
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(kc.AdminKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	wl, err := kubernetes.NewForConfig(restCfg)
	g.Expect(err).NotTo(HaveOccurred())

	// What the operator provides, as docs/compatibility.md says: the cluster's admin kubeconfig for
	// YonderControlPlane, the cluster CA for CABPK (<cluster>-ca), and the hosts with their credentials
	// and cleanup.
	for _, s := range kc.AttachSecrets(ns, name, "kadm-admin") {
		g.Expect(st.Client.Create(ctx, s)).To(Succeed())
	}
	registerKubeadmHosts(ctx, t, ns, key, workers, nil)

	// The flavor, with only the variables the docs name.
	env := []string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=kadm-admin",
		"YONDER_KUBEADM_IGNORE_PREFLIGHT_ERRORS=[" + strings.Join(kubeadm.IgnoredPreflightErrors(), ",") + "]"}
	out, err := st.Clusterctl(ctx, env, "generate", "cluster", name, "--infrastructure", "yonder-ssh:v0.1.0",
		"--flavor", "ssh-kubeadm", "--kubernetes-version", kubeadm.Version, "--target-namespace", ns, "--worker-machine-count", fmt.Sprint(len(workers)))
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode([]byte(out))
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GroupVersionKind() == kubeadmConfigTemplateGVK {
			addCABPKKeys(t, o)
		}
		g.Expect(st.Client.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	t.Cleanup(func() { deleteKubeadmCluster(context.Background(), t, ns, name, workers) })

	joined := waitKubeadmWorkers(ctx, t, wl, ns, name, len(workers))
	t.Logf("2 workers joined by kubeadm, Ready: %s after the start", time.Since(t0).Round(time.Second))
	runPodsOn(ctx, t, wl, joined)
	for _, h := range workers {
		checkCABPKKeys(ctx, t, h)
	}

	// Scale down: both hosts are cleaned by kubeadm reset and released.
	scaleIn(ctx, t, ns, name+"-md-0", 0)
	g.Eventually(func(g Gomega) {
		for _, h := range workers {
			host := &infrav1.YonderSSHHost{}
			g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, host)).To(Succeed())
			g.Expect(host.Status.Phase).To(Equal(infrav1.HostPhaseAvailable), h.Name)
		}
		nodes, err := wl.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nodes.Items).To(HaveLen(1), "only the control-plane Node is left")
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	for _, h := range workers {
		// Cleaned: no kubelet credentials or configuration of the old Node, no kubelet flags, no sentinel.
		out, err := h.Output(ctx, "for f in /etc/kubernetes/kubelet.conf /etc/kubernetes/bootstrap-kubelet.conf /var/lib/kubelet/config.yaml "+
			"/var/lib/kubelet/kubeadm-flags.env /etc/default/kubelet /run/cluster-api/bootstrap-success.complete; do test -e $f && echo $f; done; true")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Fields(out)).To(BeEmpty(), "left on %s after its release", h.Name)
	}

	// Scale up: the same hosts are claimed and joined again.
	scaleIn(ctx, t, ns, name+"-md-0", int32(len(workers)))
	joined = waitKubeadmWorkers(ctx, t, wl, ns, name, len(workers))
	runPodsOn(ctx, t, wl, joined)
	t.Logf("scenario kubeadm workers (init, 2 joins, scale to 0 and back) took %s", time.Since(t0).Round(time.Second))
}

var kubeadmConfigTemplateGVK = bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate")

// cabpkOrder is where the workers' bootstrap commands note that they ran, in order.
const cabpkOrder = "/var/lib/yonder-e2e/order"

// addCABPKKeys adds to a KubeadmConfigTemplate what a KubeadmConfig's spec may ask of a host besides the
// join, in each form CABPK renders: bootCommands (cloud-init's bootcmd), pre- and postKubeadmCommands around
// the real kubeadm join, files plain, base64-encoded and appended to (CABPK refuses two entries for one path,
// so the appended file is the one bootcmd wrote), with owner and permissions, and a user with groups, a
// locked password, a sudo rule and an authorized key.
func addCABPKKeys(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	spec := []string{"spec", "template", "spec"}
	set := func(v any, field ...string) {
		g.Expect(unstructured.SetNestedField(o.Object, v, append(spec, field...)...)).To(Succeed(), "%v", field)
	}
	// bootcmd runs before write_files: the file it writes is there to be appended to.
	set([]any{"mkdir -p " + filepath.Dir(cabpkOrder) + " /etc/yonder-e2e && echo bootcmd >> " + cabpkOrder + " && echo hello > /etc/yonder-e2e/greeting"}, "bootCommands")
	pre, _, _ := unstructured.NestedSlice(o.Object, append(spec, "preKubeadmCommands")...)
	set(append(pre, "echo pre >> "+cabpkOrder), "preKubeadmCommands")
	set([]any{"test -s /etc/kubernetes/kubelet.conf && echo post-joined >> " + cabpkOrder}, "postKubeadmCommands")
	set([]any{
		map[string]any{"path": "/etc/yonder-e2e/app.conf", "owner": "root:root", "permissions": "0600", "content": "key: value\n"},
		map[string]any{"path": "/etc/yonder-e2e/greeting", "content": "appended\n", "append": true},
		map[string]any{"path": "/etc/yonder-e2e/blob", "encoding": "base64", "content": base64.StdEncoding.EncodeToString([]byte("bin\x00ary"))},
	}, "files")
	set([]any{map[string]any{
		"name": "yci-capi", "gecos": "CAPI operator", "groups": "yci-capiops", "homeDir": "/home/yci-capi", "shell": "/bin/sh",
		"lockPassword": true, "sudo": "ALL=(ALL) NOPASSWD:ALL",
		"sshAuthorizedKeys": []any{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests capi@example"},
	}}, "users")
}

// checkCABPKKeys checks on a joined worker what addCABPKKeys asked: bootcmd first, then the pre commands,
// kubeadm join, the post commands; the files with their content, owner and mode; the user.
func checkCABPKKeys(ctx context.Context, t *testing.T, h *hosts.Host) {
	t.Helper()
	g := NewWithT(t)
	out, err := h.Output(ctx, "cat "+cabpkOrder+"; stat -c '%U:%G %a' /etc/yonder-e2e/app.conf; cat /etc/yonder-e2e/app.conf /etc/yonder-e2e/greeting; "+
		"od -An -c /etc/yonder-e2e/blob; id -nG yci-capi; getent passwd yci-capi | cut -d: -f5-; getent shadow yci-capi | cut -c1-10; "+
		"cat /home/yci-capi/.ssh/authorized_keys; grep -rh yci-capi /etc/sudoers.d/")
	g.Expect(err).NotTo(HaveOccurred(), out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := range lines {
		lines[i] = strings.Join(strings.Fields(lines[i]), " ")
	}
	g.Expect(lines).To(Equal([]string{
		"bootcmd", "pre", "post-joined",
		"root:root 600", "key: value", "hello", "appended",
		`b i n \0 a r y`,
		"yci-capi yci-capiops", "CAPI operator:/home/yci-capi:/bin/sh", "yci-capi:!",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests capi@example",
		"# User rules for yci-capi", "yci-capi ALL=(ALL) NOPASSWD:ALL",
	}), "on %s", h.Name)
}

// startKubeadmHosts boots n full-OS hosts named <prefix>-<i>, which authorize one new client key, and
// stops them when the test ends.
func startKubeadmHosts(ctx context.Context, t *testing.T, prefix string, n int) ([]*hosts.Host, []byte) {
	t.Helper()
	key, _, err := hosts.NewClientKey()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := hosts.StartFullOS(ctx, st.Net, prefix, n, hosts.FullOSOptions{ClientKeyPEM: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Stop()
		}
	})
	return hs, key
}

// registerKubeadmHosts registers hs in ns as the operator of docs/compatibility.md does: their SSH key in
// the Secret kubeadm-hosts-ssh, and a YonderSSHHost each with kubeadm's cleanup and the labels that labels gives
// it (nil: none).
func registerKubeadmHosts(ctx context.Context, t *testing.T, ns string, key []byte, hs []*hosts.Host, labels func(*hosts.Host) map[string]string) {
	t.Helper()
	g := NewWithT(t)
	const secret = "kubeadm-hosts-ssh"
	g.Expect(st.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: ns},
		Data: map[string][]byte{"ssh-privatekey": key}})).To(Succeed())
	for _, h := range hs {
		host := &infrav1.YonderSSHHost{
			ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: ns},
			Spec: infrav1.YonderSSHHostSpec{
				SSHEndpoint: infrav1.SSHEndpoint{
					Address: h.Address.String(), Port: int32(h.Port), User: h.User,
					CredentialsSecretRef: infrav1.SecretReference{Name: secret},
					HostKey:              hostKey(h),
				},
				Cleanup: infrav1.CleanupSpec{Commands: kubeadmCleanup},
			},
		}
		if labels != nil {
			host.Labels = labels(h)
		}
		g.Expect(st.Client.Create(ctx, host)).To(Succeed())
	}
}

// hostKey is a host's public host key as YonderSSHHost pins it.
func hostKey(h *hosts.Host) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey)))
}

// deleteKubeadmCluster deletes Cluster ns/name and waits until it is gone and its hosts are Available again.
func deleteKubeadmCluster(ctx context.Context, t *testing.T, ns, name string, hs []*hosts.Host) {
	t.Helper()
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := st.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("failed to delete Cluster %s/%s: %v", ns, name, err)
		return
	}
	err := stack.WaitFor(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		if err := st.Client.Get(ctx, client.ObjectKeyFromObject(c), c); !apierrors.IsNotFound(err) {
			return false, nil
		}
		for _, h := range hs {
			host := &infrav1.YonderSSHHost{}
			if err := st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, host); err != nil || host.Status.Phase != infrav1.HostPhaseAvailable {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("Cluster %s/%s was not deleted with its hosts released: %v\n%s", ns, name, err, st.ManagerLog("infrastructure-yonder-ssh", 30))
	}
}

// waitKubeadmWorkers waits until Cluster ns/cluster has n Machines whose Nodes in the kubeadm cluster are Ready
// with the Machine's providerID, and returns the Nodes' names.
func waitKubeadmWorkers(ctx context.Context, t *testing.T, wl kubernetes.Interface, ns, cluster string, n int) []string {
	t.Helper()
	var last string
	var names []string
	err := stack.WaitFor(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
		ms, err := machinesIn(ctx, ns, cluster)
		if err != nil {
			return false, err
		}
		names = nil
		var states []string
		for _, m := range ms {
			states = append(states, fmt.Sprintf("%s phase=%s providerID=%q node=%q", m.Name, m.Status.Phase, m.Spec.ProviderID, m.Status.NodeRef.Name))
			if !m.DeletionTimestamp.IsZero() || !m.Status.NodeRef.IsDefined() || m.Spec.ProviderID == "" {
				continue
			}
			node, err := wl.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
			if err != nil || node.Spec.ProviderID != m.Spec.ProviderID {
				continue
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					names = append(names, node.Name)
				}
			}
		}
		last = fmt.Sprintf("%d machines: %s", len(ms), strings.Join(states, "; "))
		return len(ms) == n && len(names) == n, nil
	})
	if err != nil {
		t.Fatalf("Cluster %s/%s did not reach %d kubeadm-joined Ready workers: %s\nssh manager log:\n%s\nCABPK log:\n%s", ns, cluster, n, last,
			st.ManagerLog("infrastructure-yonder-ssh", 40), st.ManagerLog("bootstrap-kubeadm", 40))
	}
	return names
}

// runPodsOn runs a pod on each named Node and waits until every one is Running there.
func runPodsOn(ctx context.Context, t *testing.T, wl kubernetes.Interface, nodes []string) {
	t.Helper()
	g := NewWithT(t)
	for _, n := range nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "on-" + n, Namespace: "default"},
			// Bound to its Node, past the scheduler; tolerating a control-plane Node's taint too.
			Spec: corev1.PodSpec{NodeName: n, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, Containers: []corev1.Container{{
				Name: "pause", Image: hosts.FullOSSandboxImage, ImagePullPolicy: corev1.PullNever,
			}}},
		}
		err := wl.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		g.Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		g.Eventually(func() error {
			_, err := wl.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			return err
		}, time.Minute, time.Second).Should(Succeed())
	}
	g.Eventually(func(g Gomega) {
		for _, n := range nodes {
			p, err := wl.CoreV1().Pods("default").Get(ctx, "on-"+n, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), n)
		}
	}, 3*time.Minute, time.Second).Should(Succeed())
}
