package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/stack"
)

const (
	pluginNamespace = "plugin"
	pluginCluster   = "plugin"
	manualNode      = "manual-0"
)

// releasedPlugin builds kubectl-yonder the way `make release` does (static, -trimpath, -tags release),
// ALONE into an empty directory; run executes it there with nothing of the checkout around it
// (HOME is that directory, PATH only the system's), against the stack's management cluster.
func releasedPlugin(t *testing.T) func(args ...string) (string, string, error) {
	t.Helper()
	// ForTest builds into a directory of its own: the binary is alone there.
	bin := gobuild.ForTest(t, "./cmd/kubectl-yonder", gobuild.Options{Static: true, TrimPath: true, Tags: []string{"release"}})
	empty := filepath.Dir(bin)
	return func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append(args, "--kubeconfig", st.Management.AdminKubeconfigPath)...)
		cmd.Dir = empty
		cmd.Env = []string{"HOME=" + empty, "PATH=/usr/bin:/bin"}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
}

// TestReleasedPlugin is the operator's CLI as released, outside the checkout, against a live management
// cluster: `host add` pins a spare host's key and registers it, `host list` shows it Available, a Cluster
// generated with clusterctl claims it and its worker joins, `describe cluster` shows host, Machine and
// Node, and `machine manual-bootstrap` joins the second spare host by hand with the REAL yonder-agent: its
// blob and the node image of the control plane's version come from the registry the installed bootstrap
// provider names, and the Node is Ready with that kubelet version and runs a pod. It runs after the other
// scenarios of the stack (the spare hosts are nobody else's).
func TestReleasedPlugin(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	run := releasedPlugin(t)
	t.Logf("released plugin built in %s", time.Since(t0).Round(time.Second))
	spare := st.Spare["spare"]
	g.Expect(spare).To(HaveLen(2))
	// What the operator has: the hosts' login key, the registry's CA; the namespace and its Secrets.
	files := t.TempDir()
	keyFile, caFile := filepath.Join(files, "id_ed25519"), filepath.Join(files, "registry-ca.crt")
	g.Expect(os.WriteFile(keyFile, st.ClientKeyPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(caFile, st.Registry.CACertPEM, 0o600)).To(Succeed())
	createClusterSecrets(ctx, t, pluginNamespace)

	// host add + host list.
	t1 := time.Now()
	h := spare[0]
	out, errOut, err := run("host", "add", h.Name, "-n", pluginNamespace, "--address", h.Address.String(), "--port", fmt.Sprint(h.Port),
		"--ssh-user", h.User, "--key", keyFile, "--failure-domain", "spare")
	g.Expect(err).NotTo(HaveOccurred(), "host add: %s %s", out, errOut)
	added := &infrav1.YonderSSHHost{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: pluginNamespace, Name: h.Name}, added)).To(Succeed())
	g.Expect(added.Spec.HostKey).To(Equal(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey)))), "host add pinned another key than the host's")
	var list string
	g.Eventually(func(g Gomega) {
		list, errOut, err = run("host", "list", "-n", pluginNamespace)
		g.Expect(err).NotTo(HaveOccurred(), errOut)
		g.Expect(list).To(MatchRegexp(`(?m)^`+h.Name+`\s+`+h.Address.String()+`\s+Available\s`), "host list:\n%s", list)
	}, 2*time.Minute, 2*time.Second).Should(Succeed())
	t.Logf("host add + host list: %s Available in %s\n%s", h.Name, time.Since(t1).Round(time.Second), list)

	// A Cluster claims the added host; describe cluster shows it.
	t1 = time.Now()
	apply(ctx, t, generateClusterIn(ctx, t, pluginNamespace, pluginCluster, "ssh", 1, stack.KubernetesVersion))
	ms := waitWorkersIn(ctx, t, pluginNamespace, pluginCluster, 1, 8*time.Minute)
	g.Expect(ms[0].Spec.ProviderID).To(Equal("yonder-ssh://" + pluginNamespace + "/" + h.Name))
	desc, errOut, err := run("describe", "cluster", pluginCluster, "-n", pluginNamespace)
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	// The tree: the Machine (Running) with, under it, its host (claimed by it: provisioned, at its address)
	// and its Node (Ready, the kubelet's version).
	g.Expect(desc).To(MatchRegexp(`(?m)─ Machine/`+ms[0].Name+`\s+True\s+Running.*\n.*─ YonderSSHHost/`+h.Name+`\s+True\s+Provisioned, `+regexp.QuoteMeta(h.Address.String())+`,`),
		"describe cluster:\n%s", desc)
	g.Expect(desc).To(MatchRegexp(`(?m)─ Node/`+ms[0].Status.NodeRef.Name+`\s+True\s.*\s`+regexp.QuoteMeta(stack.KubernetesVersion)+`\s*$`), "describe cluster:\n%s", desc)
	t.Logf("worker on the added host Ready in %s; describe cluster:\n%s", time.Since(t1).Round(time.Second), desc)

	// manual-bootstrap with the real agent.
	t1 = time.Now()
	joinByHand(ctx, t, run, spare[1], caFile)
	t.Logf("manual-bootstrap: Node %s Ready with kubelet %s, pod running, in %s", manualNode, stack.KubernetesVersion, time.Since(t1).Round(time.Second))

	t1 = time.Now()
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: pluginNamespace, Name: pluginCluster}}
	g.Expect(st.Client.Delete(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &infrav1.YonderSSHHost{}
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(added), got)).To(Succeed())
		g.Expect(got.Spec.ConsumerRef).To(BeNil(), "host %s still claimed", h.Name)
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(c), c)).NotTo(Succeed())
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	t.Logf("Cluster deleted, the added host released, in %s (whole test %s)", time.Since(t1).Round(time.Second), time.Since(t0).Round(time.Second))
}

// joinByHand prints the join line with the released plugin — only the CA file and the mirrored registries
// given, the agent and the node image from the bootstrap provider's image repository — pipes it to
// `ssh host bash`, and waits for the Node to be Ready with the control plane's kubelet version and to run
// a pod. The node is reset and its Node deleted at the end of the test.
func joinByHand(ctx context.Context, t *testing.T, run func(...string) (string, string, error), h *hosts.Host, caFile string) {
	t.Helper()
	g := NewWithT(t)
	line, errOut, err := run("machine", "manual-bootstrap", manualNode, "--cluster-name", pluginCluster, "-n", pluginNamespace,
		"--registry-ca-file", caFile, "--registry-mirror-of", "ghcr.io,yonder.test")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	g.Expect(strings.Count(strings.TrimSpace(line), "\n")).To(BeZero(), "one line")
	t.Cleanup(func() {
		if out, err := h.Output(context.Background(), "yonder-agent reset"); err != nil {
			t.Errorf("failed to reset the manually joined host %s: %s: %v", h.Name, out, err)
		}
		if err := st.WorkloadClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: manualNode}}); client.IgnoreNotFound(err) != nil {
			t.Errorf("failed to delete Node %s: %v", manualNode, err)
		}
	})
	sc, err := h.Dial(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = sc.Close() }()
	sess, err := sc.NewSession()
	g.Expect(err).NotTo(HaveOccurred())
	sess.Stdin = strings.NewReader(line)
	combined, err := sess.CombinedOutput("bash")
	g.Expect(err).NotTo(HaveOccurred(), "the join line failed on %s:\n%s", h.Name, combined)

	// The host's AgentConfig pins what the registry had: the agent verified by its sha256 and the node
	// image of the version by digest, pulled through the registry with its CA.
	raw, err := h.Output(ctx, "cat "+agentv1.DefaultPath)
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := agentv1.Decode([]byte(raw))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Rootfs.Image).To(MatchRegexp(`^` + st.ImageRepository() + `/yonder-node@sha256:[0-9a-f]{64}$`))
	g.Expect(cfg.Registry).NotTo(BeNil())
	g.Expect(cfg.Registry.CACertificate).To(Equal(string(st.Registry.CACertPEM)))
	g.Expect(cfg.KubernetesVersion).To(Equal(stack.KubernetesVersion))

	var node corev1.Node
	g.Eventually(func(g Gomega) {
		g.Expect(st.WorkloadClient.Get(ctx, client.ObjectKey{Name: manualNode}, &node)).To(Succeed())
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		g.Expect(ready).To(BeTrue(), "Node %s not Ready: %v", manualNode, node.Status.Conditions)
	}, 6*time.Minute, 2*time.Second).Should(Succeed())
	g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(stack.KubernetesVersion))
	runPodOn(ctx, t, manualNode)
}

// runPodOn runs a busybox pod (pulled through the registry's mirror of yonder.test) on node until it
// succeeds, and deletes it.
func runPodOn(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	g := NewWithT(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "on-" + node},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "echo", Image: stack.BusyboxImage, Command: []string{"sh", "-c", "echo hello from $(hostname)"}}}},
	}
	g.Expect(st.WorkloadClient.Create(ctx, pod)).To(Succeed())
	defer func() { _ = st.WorkloadClient.Delete(context.Background(), pod) }()
	g.Eventually(func(g Gomega) {
		g.Expect(st.WorkloadClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s: %s %v", pod.Name, pod.Status.Phase, pod.Status.ContainerStatuses)
	}, 3*time.Minute, 2*time.Second).Should(Succeed())
}

// createClusterSecrets creates namespace ns with what the stack's templates name: the workload cluster's
// admin kubeconfig and the registry's CA (as an operator runs `kubectl create secret`).
func createClusterSecrets(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(st.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	for name, data := range map[string]map[string][]byte{
		stack.WorkloadKubeconfigSecret: {"value": st.Workload.AdminKubeconfig},
		stack.RegistryCASecret:         {"ca.crt": st.Registry.CACertPEM},
	} {
		g.Expect(st.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data})).To(Succeed())
	}
}
