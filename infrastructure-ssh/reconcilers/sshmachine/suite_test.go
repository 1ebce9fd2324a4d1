package sshmachine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshtest"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/managercache"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/envtest"
)

var (
	env *envtest.Environment

	wlOnce sync.Once
	wl     *controlplane.ControlPlane
	wlErr  error
)

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	code := envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:    []string{"infrastructure-ssh/config/crd/bases"},
		WebhookManifestPaths: []string{"infrastructure-ssh/config/webhook/manifests.yaml"},
		AddToScheme:          []func(*runtime.Scheme) error{infrav1.AddToScheme},
		// Webhooks are served by the environment's manager; the provider's reconcilers run in their own
		// manager (startProvider) so tests can stop and restart them like a crashing controller.
		Setup: func(_ context.Context, e *envtest.Environment) error { return setup.SetupWebhooks(e.Manager) },
	}, func(e *envtest.Environment) { env = e })
	if wl != nil {
		_ = wl.Stop()
	}
	os.Exit(code)
}

// workload returns the workload cluster's control plane, shared by the tests of this package.
func workload(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	wlOnce.Do(func() { wl, wlErr = controlplane.Start(context.Background(), controlplane.Options{Name: "ssh-wl"}) })
	if wlErr != nil {
		t.Fatalf("failed to start the workload control plane: %v", wlErr)
	}
	return wl
}

// provider is a running instance of the provider's reconcilers (a yonder-ssh-manager).
type provider struct {
	cancel context.CancelFunc
	done   chan error
}

func testOptions() setup.Options {
	return setup.Options{ProbeInterval: 2 * time.Second, PollInterval: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond,
		CleanupRetries: 3, SkipNameValidation: true, Dialer: sshexec.SSHDialer{Timeout: 3 * time.Second}}
}

// startProvider starts the provider's reconcilers in a manager of their own.
func startProvider(t testing.TB, o setup.Options) *provider {
	return startProviderWithConfig(t, env.Config, o)
}

// startProviderWithConfig starts the provider with its own rest config (e.g. counting requests).
func startProviderWithConfig(t testing.TB, cfg *rest.Config, o setup.Options) *provider {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 env.GetScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 managercache.ClientOptions(),
	})
	if err != nil {
		t.Fatalf("failed to create provider manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup.SetupReconcilers(ctx, mgr, o); err != nil {
		cancel()
		t.Fatalf("failed to set up reconcilers: %v", err)
	}
	p := &provider{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- mgr.Start(ctx) }()
	t.Cleanup(p.stop)
	return p
}

// stop stops the manager (like a killed controller: in-flight reconciles see a cancelled context).
func (p *provider) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "provider manager stopped with: %v\n", err)
	}
	p.cancel = nil
}

// newCluster creates a Cluster whose control plane is the workload apiserver. The test acts as the
// control plane provider (a generic control plane object marked initialized) because this provider
// only supplies workers; the real control plane adapter is another provider.
func newCluster(t testing.TB, g *WithT, ns, name string) *clusterv1.Cluster {
	ctx := context.Background()
	cp := workload(t)
	sc := &infrav1.YonderSSHCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderSSHClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: cp.Host.String(), Port: int32(cp.Port)}}}
	g.Expect(env.Create(ctx, sc)).To(Succeed())
	gcp := &unstructured.Unstructured{}
	gcp.SetAPIVersion(builder.ControlPlaneGroupVersion.String())
	gcp.SetKind(builder.GenericControlPlaneKind)
	gcp.SetNamespace(ns)
	gcp.SetName(name)
	_ = unstructured.SetNestedMap(gcp.Object, map[string]any{}, "spec")
	g.Expect(env.Create(ctx, gcp)).To(Succeed())
	_ = unstructured.SetNestedField(gcp.Object, true, "status", "initialization", "controlPlaneInitialized")
	g.Expect(env.Status().Update(ctx, gcp)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHCluster", Name: name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: name},
		},
	}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	g.Expect(cp.WriteKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cluster.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
	}).Should(Succeed())
	return cluster
}

// registerHosts creates a credentials Secret and one YonderSSHHost per host, with pinned host keys.
func registerHosts(g *WithT, ns string, hs []*sshtest.Host, keyPEM []byte, labels map[string]string, cleanup []string) []*infrav1.YonderSSHHost {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh-" + hs[0].Name}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}}
	g.Expect(env.Create(ctx, secret)).To(Succeed())
	var out []*infrav1.YonderSSHHost
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
		out = append(out, obj)
	}
	return out
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
func checkClaims(g Gomega, ns string, allowDeleted bool) map[string]string {
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
		if !allowDeleted {
			g.Expect(live).To(HaveKey(ref.UID), "host %s is claimed by %s, which no longer exists", h.Name, ref.Name)
		}
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

var _ = ptr.To[int]
