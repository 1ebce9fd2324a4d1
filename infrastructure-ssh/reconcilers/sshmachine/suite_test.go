package sshmachine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/manager"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

var (
	env *envtest.Environment
	wl  = &harness.Workload{Name: "ssh-wl"}
)

func TestMain(m *testing.M) {
	harness.UnlimitedCAPIReconcilers()
	harness.Main(m, 90*time.Second, 200*time.Millisecond, harness.Providers("ssh"), func(e *envtest.Environment) { env = e }, wl)
}

func testOptions() setup.Options {
	return setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, ProbeInterval: 2 * time.Second,
		PollInterval: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond, CleanupRetries: 3, Dialer: sshexec.SSHDialer{Timeout: 3 * time.Second}}
}

// startProvider starts the provider's reconcilers in a manager of their own.
func startProvider(t testing.TB, o setup.Options) *harness.Provider {
	t.Helper()
	return harness.StartProvider(t, env.Config, env.GetScheme(), setup.Reconcilers(o))
}

// newCluster creates a Cluster on a YonderSSHCluster whose control plane is the workload apiserver.
func newCluster(t testing.TB, g *WithT, ns, name string) *clusterv1.Cluster {
	t.Helper()
	return harness.AttachedCluster(t, g, env.Client, wl.Get(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderSSHCluster{Spec: infrav1.YonderSSHClusterSpec{ControlPlaneEndpoint: harness.Endpoint(wl.Get(t))}}})
}

// registerHosts creates a credentials Secret and one YonderSSHHost per host, with pinned host keys.
func registerHosts(g *WithT, ns string, hs []*sshhosts.Host, keyPEM []byte, labels map[string]string, cleanup []string) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh-" + hs[0].Name}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}}
	g.Expect(env.Create(ctx, secret)).To(Succeed())
	for _, h := range hs {
		obj := &infrav1.YonderSSHHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: h.Name, Labels: map[string]string{"yonder.dev/host": h.Name}},
			Spec: infrav1.YonderSSHHostSpec{
				SSHEndpoint: infrav1.SSHEndpoint{Address: h.Address.String(), Port: int32(h.Port), User: "root",
					CredentialsSecretRef: infrav1.SecretReference{Name: secret.Name}, HostKey: sshexec.FormatHostKey(h.HostKey)},
				Cleanup: infrav1.CleanupSpec{Commands: cleanup},
			},
		}
		for k, v := range labels {
			obj.Labels[k] = v
		}
		g.Expect(env.Create(ctx, obj)).To(Succeed())
	}
}

// dataSecret creates a bootstrap data Secret (value + format) as a bootstrap provider does.
func dataSecret(g *WithT, ns, name, cluster, value string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte(value), "format": []byte("cloud-config")},
	}
	g.Expect(env.Create(context.Background(), s)).To(Succeed())
	return s
}

// sshMachines lists the YonderSSHMachines of a namespace, uncached: invariants compare machines with hosts,
// and two informers of the test manager's cache may lag each other.
func sshMachines(g Gomega, ns string) []infrav1.YonderSSHMachine {
	l := &infrav1.YonderSSHMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

// hostList lists the YonderSSHHosts of a namespace, uncached (see sshMachines).
func hostList(g Gomega, ns string) []infrav1.YonderSSHHost {
	l := &infrav1.YonderSSHHostList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

// ensureNodes stands in for the Agent (not built yet): for every provisioned YonderSSHMachine it
// creates, in the workload cluster, the Node a joining kubelet would register with that providerID.
func ensureNodes(g Gomega, wlc client.Client, ns string) {
	for _, m := range sshMachines(g, ns) {
		if m.Spec.ProviderID == "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + m.Status.HostRef}, Spec: corev1.NodeSpec{ProviderID: m.Spec.ProviderID}}
		if err := wlc.Create(context.Background(), node); err != nil && !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
}

// checkClaims asserts the inventory invariants: every claim names a live YonderSSHMachine, and no
// YonderSSHMachine holds more than one host.
func checkClaims(g Gomega, ns string) map[string]string {
	live := map[string]bool{}
	for _, m := range sshMachines(g, ns) {
		live[string(m.UID)] = true
	}
	byConsumer := map[string]string{}
	for _, h := range hostList(g, ns) {
		ref := h.Spec.ConsumerRef
		if ref == nil {
			g.Expect(h.Labels).NotTo(HaveKey(infrav1.ConsumerUIDLabel), "host %s has a consumer label without a claim", h.Name)
			continue
		}
		g.Expect(byConsumer).NotTo(HaveKey(ref.UID), "machine %s claims hosts %s and %s", ref.Name, byConsumer[ref.UID], h.Name)
		byConsumer[ref.UID] = h.Name
		g.Expect(live).To(HaveKey(ref.UID), "host %s is claimed by %s, which no longer exists", h.Name, ref.Name)
	}
	return byConsumer
}

func condition(m *infrav1.YonderSSHMachine, t string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

var errNotYet = errors.New("not yet")

func reasonOf(ns, name, t string) func() (string, error) {
	return func() (string, error) {
		m := &infrav1.YonderSSHMachine{}
		if err := env.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return "", err
		}
		c := condition(m, t)
		if c == nil {
			return "", fmt.Errorf("%w: no %s condition", errNotYet, t)
		}
		return c.Reason, nil
	}
}
