package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/gobuild"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

const leaseName = "yonder-net-controller.network.yonder.dev"

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	os.Exit(envtest.Run(m, testenv.Options(), func(e *envtest.Environment) { env = e }))
}

func freePort(g Gomega) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// Two replicas of the real binary: one leads and reconciles; when it stops, the other takes over.
func TestLeaderElectionHandsOver(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := gobuild.ForTest(t, "./network/cmd/yonder-net-controller", gobuild.Options{})

	kc := clientcmdapi.NewConfig()
	kc.Clusters["env"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["env"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	kc.Contexts["env"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "env"}
	kc.CurrentContext = "env"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())
	ns := env.CreateNamespace(ctx, t, "leader")

	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"one", "two"} {
		cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--leader-election-namespace", ns.Name,
			"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms",
			"--metrics-bind-address=0", "--health-probe-bind-address=0", fmt.Sprintf("--webhook-port=%d", freePort(g)),
			"--webhook-cert-dir", filepath.Join(dir, id), "--webhook-cert-secret=net-webhook", "--webhook-configuration=")
		cmd.Env = append(os.Environ(), "POD_NAMESPACE="+ns.Name)
		log, err := os.Create(filepath.Join(dir, id+".log"))
		g.Expect(err).NotTo(HaveOccurred())
		cmd.Stdout, cmd.Stderr = log, log
		g.Expect(cmd.Start()).To(Succeed())
		procs[id] = cmd
		if id == "one" {
			// Replica one leads: the second starts only once the Lease is held.
			g.Eventually(func() error {
				return env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: leaseName}, &coordinationv1.Lease{})
			}).Should(Succeed())
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			if t.Failed() {
				data, _ := os.ReadFile(log.Name())
				t.Logf("%s log:\n%s", id, data)
			}
		})
	}
	t.Cleanup(func() { _ = testenv.Cleanup(context.Background(), env.Client) })

	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "hq"}, Spec: netv1.SiteSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-restriction.kubernetes.io/loc": "hq"}}, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.77.0.0/16"}},
	}})).To(Succeed())
	labelled := func(name string) func(Gomega) {
		return func(g Gomega) {
			n := &corev1.Node{}
			g.Expect(env.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
			g.Expect(n.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "hq"))
			g.Expect(n.Spec.PodCIDRs).To(HaveLen(1))
		}
	}
	_, err := testenv.CreateNode(ctx, env.Client, "hq-1", map[string]string{"node-restriction.kubernetes.io/loc": "hq"}, "", true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(labelled("hq-1")).Should(Succeed())

	lease := &coordinationv1.Lease{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: leaseName}, lease)).To(Succeed())
	holder := *lease.Spec.HolderIdentity
	// Stopping the leader releases the Lease; replica two takes over and keeps reconciling.
	g.Expect(procs["one"].Process.Signal(syscall.SIGTERM)).To(Succeed())
	_, _ = procs["one"].Process.Wait()
	_, err = testenv.CreateNode(ctx, env.Client, "hq-2", map[string]string{"node-restriction.kubernetes.io/loc": "hq"}, "", true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(labelled("hq-2")).Should(Succeed())
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: leaseName}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	g.Expect(*lease.Spec.HolderIdentity).NotTo(Equal(holder))

	// Both replicas used the same webhook certificate Secret.
	one, err := os.ReadFile(filepath.Join(dir, "one", "tls.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	two, err := os.ReadFile(filepath.Join(dir, "two", "tls.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(one).To(Equal(two))
}
