package metalmachine_test

import (
	"context"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/manager"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/test/bmhsim"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
)

var (
	env *envtest.Environment
	wl  = &harness.Workload{Name: "metal-wl"}
)

func TestMain(m *testing.M) {
	harness.UnlimitedCAPIReconcilers()
	harness.Main(m, 90*time.Second, 100*time.Millisecond, harness.Providers("metal"), func(e *envtest.Environment) { env = e }, wl)
}

func testOptions() setup.Options {
	return setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}}
}

func startProvider(t testing.TB, o setup.Options) *harness.Provider {
	t.Helper()
	return harness.StartProvider(t, env.Config, env.GetScheme(), setup.Reconcilers(o))
}

// newCluster creates a Cluster on a YonderMetalCluster whose control plane is the workload apiserver. Its
// infrastructure is provisioned by a provider run just for that, so tests that start and stop providers
// themselves begin with a ready Cluster.
func newCluster(t testing.TB, g *WithT, ns, name string) *clusterv1.Cluster {
	t.Helper()
	p := startProvider(t, testOptions())
	defer p.Stop()
	return harness.AttachedCluster(t, g, env.Client, wl.Get(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderMetalCluster{Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: harness.Endpoint(wl.Get(t))}}})
}

// hostSpec describes one BareMetalHost to register.
type hostSpec = bmhsim.Host

// registerHosts creates BareMetalHosts with the status an inspected host has.
func registerHosts(g Gomega, ns string, specs ...hostSpec) {
	bmhsim.Register(g, env.Client, ns, specs...)
}

// simulateHostController starts the host controller simulator for namespace ns until the test ends.
func simulateHostController(t testing.TB, ns string) *bmhsim.Simulator {
	t.Helper()
	return bmhsim.Start(t, env.Client, env.GetAPIReader(), ns)
}

// dataSecret creates a bootstrap data Secret (value + format) as a bootstrap provider does.
func dataSecret(g Gomega, ns, name, cluster string) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
	}
	g.Expect(env.Create(context.Background(), sec)).To(Succeed())
	return sec
}

func testImage() *infrav1.Image {
	return &infrav1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123456789abcdef0123456789abcdef", ChecksumType: "md5", Format: "qcow2"}
}

// newMachineDeployment creates a YonderMetalMachineTemplate and a MachineDeployment of replicas from it.
func newMachineDeployment(g Gomega, ns, name string, cluster *clusterv1.Cluster, data string, replicas int32, sel map[string]string) *clusterv1.MachineDeployment {
	ctx := context.Background()
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{
			Spec: infrav1.YonderMetalMachineSpec{Image: testImage(), AutomatedCleaningMode: "metadata",
				HostSelector: infrav1.HostSelector{MatchLabels: sel}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	return newMachineDeploymentFrom(g, ns, name, cluster, data, replicas, tmpl.Name)
}

// newMachineDeploymentFrom creates a MachineDeployment of replicas from an existing template.
func newMachineDeploymentFrom(g Gomega, ns, name string, cluster *clusterv1.Cluster, data string, replicas int32, tmpl string) *clusterv1.MachineDeployment {
	return harness.MachineDeployment(g, env, harness.MachineDeploymentOptions{Namespace: ns, Name: name, Cluster: cluster.Name,
		Replicas: replicas, Labels: map[string]string{"md": name}, DataSecret: data,
		Infrastructure: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: tmpl}})
}

// metalMachines lists the YonderMetalMachines of a namespace, uncached: invariants compare machines with
// hosts, and two informers of the test manager's cache may lag each other.
func metalMachines(g Gomega, ns string) []infrav1.YonderMetalMachine {
	l := &infrav1.YonderMetalMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

// hostList lists the BareMetalHosts of a namespace, uncached.
func hostList(g Gomega, ns string) []metal3v1.BareMetalHost {
	l := &metal3v1.BareMetalHostList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

func host(g Gomega, ns, name string) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h)).To(Succeed())
	return h
}

// checkClaims asserts the inventory invariants: no YonderMetalMachine holds more than one host and every
// claim by a YonderMetalMachine names a live one, by name and claim identity (its UID, or the first UID
// that a machine recreated by clusterctl move keeps in an annotation). It returns claim identity → host.
func checkClaims(g Gomega, ns string) map[string]string {
	live := map[string]string{}
	for _, m := range metalMachines(g, ns) {
		live[string(claim.ID(&m, infrav1.ClaimIDAnnotation))] = m.Name
	}
	byConsumer := map[string]string{}
	for _, h := range hostList(g, ns) {
		ref := h.Spec.ConsumerRef
		if ref == nil || ref.Kind != "YonderMetalMachine" {
			continue
		}
		g.Expect(byConsumer).NotTo(HaveKey(string(ref.UID)), "machine %s claims hosts %s and %s", ref.Name, byConsumer[string(ref.UID)], h.Name)
		byConsumer[string(ref.UID)] = h.Name
		g.Expect(live).To(HaveKeyWithValue(string(ref.UID), ref.Name), "host %s is claimed by %s, which no longer exists", h.Name, ref.Name)
	}
	return byConsumer
}

// ensureNodes stands in for the kubelet: for every provisioned YonderMetalMachine it creates, in the
// workload cluster, the Node a joining kubelet would register with that providerID.
func ensureNodes(g Gomega, wlc client.Client, ns string) {
	for _, m := range metalMachines(g, ns) {
		if m.Spec.ProviderID == "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + m.Status.HostRef}, Spec: corev1.NodeSpec{ProviderID: m.Spec.ProviderID}}
		if err := wlc.Create(context.Background(), node); err != nil && !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
}

func condition(m *infrav1.YonderMetalMachine, t string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}
