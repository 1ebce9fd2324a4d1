// Package claims_test runs the claim tests of pkg/claim — two controller replicas at once, a controller
// restarted at random points, a controller killed right before and after each of its host writes,
// clusterctl move — against BOTH infrastructure providers from one table: the SSH provider on real sshd
// hosts in network namespaces, the bare-metal provider on BareMetalHosts advanced by the host controller
// simulator (test/bmhsim). One management cluster serves both providers.
package claims_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
)

var (
	env *envtest.Environment
	wl  = &harness.Workload{Name: "claims-wl"}

	// providers is the table every test runs over.
	providers = []provider{&sshProvider{}, &metalProvider{}}
)

func TestMain(m *testing.M) {
	harness.Main(m, 90*time.Second, 100*time.Millisecond, harness.Providers("ssh", "metal"), func(e *envtest.Environment) { env = e }, wl)
}

// provider is one infrastructure provider under test: how to give it hosts, run it, and read its
// machines and hosts in one shape.
type provider interface {
	name() string

	// newInventory returns the hosts of one test in namespace ns.
	newInventory(t *testing.T, ns string) inventory
	// start runs the provider's reconcilers; o.client, when set, wraps the machine reconciler's client.
	start(t *testing.T, o startOptions) *harness.Provider
	// cluster creates an attached Cluster on the provider's infrastructure cluster kind (a provider
	// must be running, to provision its infrastructure).
	cluster(t *testing.T, g Gomega, ns, name string) *clusterv1.Cluster
	// machineTemplate creates a machine template selecting the hosts labelled pool=<pool>; it returns the
	// reference a Machine's infrastructureRef uses.
	machineTemplate(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference
	// machine creates an infrastructure machine selecting pool and returns its reference.
	machine(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference
	// newMachineObject returns an empty infrastructure machine to read into.
	newMachineObject() client.Object
	// machines lists the infrastructure machines of ns, uncached.
	machines(g Gomega, ns string) []machineView
	// hosts lists the hosts of ns, uncached.
	hosts(g Gomega, ns string) []hostView
	// recreate deletes the infrastructure machine without running its finalizer and creates it again
	// from its metadata and spec (new UID, no status), as clusterctl move does.
	recreate(g Gomega, ns, name string)
	// step names the kind of host write obj is ("claim", "handoff", "withdraw", "release"; "" for
	// others), for killing a provider at it.
	step(obj client.Object) string
	// steps lists the host writes of the provider in lifecycle order.
	steps() []string
}

// inventory is the hosts of one test.
type inventory interface {
	// add registers n more free hosts labelled pool=<pool>, named <prefix>-<i>.
	add(t *testing.T, g Gomega, prefix, pool string, n int)
	// provisionings returns, per host and claim identity, how often the host was provisioned (for a
	// host that is claimed: since its claim).
	provisionings(g Gomega) map[string]map[string]int
	// holdProvisioning keeps hand-offs from completing (true) or lets them complete.
	holdProvisioning(hold bool)
	// checkFree asserts that a released host is clean.
	checkFree(g Gomega, host string)
	// releasedOrphan asserts how host was left when its claim was released without the machine named
	// machine (which vanished without its deletion releasing it), and returns it to the pool as an
	// operator would where the provider leaves that to one.
	releasedOrphan(g Gomega, host, machine string)
}

// startOptions tune a started provider.
type startOptions struct {
	// client wraps the machine reconciler's client.
	client func(client.Client) client.Client
	// slow makes retries after failures (and any polling) slow: a test that passes with it proves that
	// watches, not polls, drive the claim.
	slow bool
}

// machineView is an infrastructure machine as the claim sees it.
type machineView struct {
	Name, UID, ClaimID, Host, Reserved, ProviderID, HostRef string
	Provisioned, Deleting, BlockMove                        bool
	Conditions                                              []metav1.Condition
	Labels                                                  map[string]string
}

// hostView is a host as the claim sees it.
type hostView struct {
	Name                     string
	ConsumerName, ConsumerID string
	Annotations              map[string]string
}

func (m machineView) reason(t string) string {
	for _, c := range m.Conditions {
		if c.Type == t {
			return c.Reason
		}
	}
	return ""
}

// checkClaims asserts the inventory invariants: no machine holds two hosts and (unless allowGone) every
// claim names a live machine. It returns claim identity → host.
func checkClaims(g Gomega, p provider, ns string, allowGone bool) map[string]string {
	live := map[string]bool{}
	for _, m := range p.machines(g, ns) {
		live[m.ClaimID] = true
	}
	byConsumer := map[string]string{}
	for _, h := range p.hosts(g, ns) {
		if h.ConsumerID == "" {
			continue
		}
		g.Expect(byConsumer).NotTo(HaveKey(h.ConsumerID), "machine %s claims hosts %s and %s", h.ConsumerName, byConsumer[h.ConsumerID], h.Name)
		byConsumer[h.ConsumerID] = h.Name
		if !allowGone {
			g.Expect(live).To(HaveKey(h.ConsumerID), "host %s is claimed by %s, which no longer exists", h.Name, h.ConsumerName)
		}
	}
	return byConsumer
}

// orphanClaims returns the hosts claimed by a machine that no longer exists, by name.
func orphanClaims(g Gomega, p provider, ns string) map[string]hostView {
	live := map[string]bool{}
	for _, m := range p.machines(g, ns) {
		live[m.ClaimID] = true
	}
	out := map[string]hostView{}
	for _, h := range p.hosts(g, ns) {
		if h.ConsumerID != "" && !live[h.ConsumerID] {
			out[h.Name] = h
		}
	}
	return out
}

// expectOrphansReleased waits until a running provider has released every claim of orphans (as
// orphanClaims returned them) and checks each host as the provider leaves it.
func expectOrphansReleased(g Gomega, p provider, inv inventory, ns string, orphans map[string]hostView) {
	for name, o := range orphans {
		g.Eventually(func(g Gomega) {
			for _, h := range p.hosts(g, ns) {
				if h.Name == name {
					g.Expect(h.ConsumerID).NotTo(Equal(o.ConsumerID), "host %s is still claimed by %s, which no longer exists", name, o.ConsumerName)
				}
			}
		}).Should(Succeed())
		inv.releasedOrphan(g, name, o.ConsumerName)
	}
}

// checkProvisionedOnce asserts that no host was provisioned twice for one machine.
func checkProvisionedOnce(g Gomega, inv inventory) {
	for h, byConsumer := range inv.provisionings(g) {
		for id, n := range byConsumer {
			g.Expect(n).To(BeNumerically("<=", 1), "host %s provisioned %d times for machine %s", h, n, id)
		}
	}
}

// checkHolders asserts the end state: every claimed host was provisioned exactly once for its holder,
// and every other host is free and clean.
func checkHolders(g Gomega, p provider, inv inventory, ns string) {
	claims := checkClaims(g, p, ns, false)
	holder := map[string]string{}
	for id, h := range claims {
		holder[h] = id
	}
	prov := inv.provisionings(g)
	for _, h := range p.hosts(g, ns) {
		if id, ok := holder[h.Name]; ok {
			g.Expect(prov[h.Name]).To(HaveKeyWithValue(id, 1), "host %s was provisioned once for the machine that holds it", h.Name)
			continue
		}
		inv.checkFree(g, h.Name)
	}
}

// provisionedCluster creates an attached Cluster named name in ns, provisioned by a provider started for it
// and stopped again: the test then decides which providers run, and when.
func provisionedCluster(t *testing.T, g Gomega, p provider, ns, name string) *clusterv1.Cluster {
	t.Helper()
	pr := p.start(t, startOptions{})
	defer pr.Stop()
	return p.cluster(t, g, ns, name)
}

// dataSecret creates a bootstrap data Secret (value + format) as a bootstrap provider does, holding
// bootstrapData.
func dataSecret(g Gomega, ns, name, cluster string) string {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
	}
	g.Expect(env.Create(context.Background(), s)).To(Succeed())
	return s.Name
}

// holdFile, while it exists on an SSH host, keeps its bootstrap from finishing.
const holdFile = "/run/yonder-claims-hold"

// bootstrapData is cloud-config that records each run on an SSH host (the metal simulator ignores it).
const bootstrapData = "#cloud-config\nruncmd:\n- sleep 0.3\n- while [ -e " + holdFile + " ]; do sleep 0.1; done\n- echo joined >> /var/lib/yonder-ssh/joined\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"

// newMachineDeployment creates a MachineDeployment of replicas over a template selecting pool.
func newMachineDeployment(g Gomega, p provider, ns, name string, cluster *clusterv1.Cluster, data string, replicas int32, pool string) *clusterv1.MachineDeployment {
	return harness.MachineDeployment(g, env, harness.MachineDeploymentOptions{Namespace: ns, Name: name, Cluster: cluster.Name,
		Replicas: replicas, Labels: map[string]string{"md": name}, DataSecret: data, Infrastructure: p.machineTemplate(g, ns, name, pool)})
}

// newMachine creates one Machine of cluster on an infrastructure machine selecting pool.
func newMachine(g Gomega, p provider, ns, name string, cluster *clusterv1.Cluster, data, pool string) {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineSpec{ClusterName: cluster.Name, Version: "v1.36.3",
			Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(data)}, InfrastructureRef: p.machine(g, ns, name, pool)}}
	g.Expect(env.Create(context.Background(), m)).To(Succeed())
}

// ensureNodes stands in for the kubelets: for every provisioned machine it creates, in the workload
// cluster, the Node a joining kubelet would register with that providerID.
func ensureNodes(g Gomega, wlc client.Client, p provider, ns string) {
	for _, m := range p.machines(g, ns) {
		if m.ProviderID == "" || m.Deleting {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + m.HostRef}, Spec: corev1.NodeSpec{ProviderID: m.ProviderID}}
		if err := wlc.Create(context.Background(), node); err != nil && !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
}

// viewOf is machine m as the claim sees it, read through the provider's annotation keys.
func viewOf(m client.Object, keys claim.Keys, providerID, hostRef string, provisioned *bool, conditions []metav1.Condition) machineView {
	a := m.GetAnnotations()
	_, block := a[clusterctlv1.BlockMoveAnnotation]
	return machineView{Name: m.GetName(), UID: string(m.GetUID()), ClaimID: claimID(a[keys.ClaimID], string(m.GetUID())),
		Host: a[keys.Host], Reserved: a[keys.ReservedHost], ProviderID: providerID, HostRef: hostRef,
		Provisioned: ptr.Deref(provisioned, false), Deleting: !m.GetDeletionTimestamp().IsZero(), BlockMove: block,
		Conditions: conditions, Labels: m.GetLabels()}
}

// claimID is the claim identity a machine reports: its annotation, or its UID before it claimed.
func claimID(annotation, uid string) string {
	if annotation != "" {
		return annotation
	}
	return uid
}

// movedMeta is the metadata clusterctl move recreates an object with: name, labels, annotations, owner
// references and finalizers (no UID, no resourceVersion).
func movedMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, Labels: m.Labels, Annotations: m.Annotations,
		OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers}
}

// recreate deletes the object ns/name without its finalizers running and creates moved(old) instead.
func recreate(g Gomega, obj client.Object, ns, name string, moved func(old client.Object) client.Object) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: name}
	g.Expect(env.GetAPIReader().Get(ctx, key, obj)).To(Succeed())
	next := moved(obj.DeepCopyObject().(client.Object)) //nolint:forcetypeassert // a copy of obj
	obj.SetFinalizers(nil)
	g.Expect(env.Update(ctx, obj)).To(Succeed())
	g.Expect(client.IgnoreNotFound(env.Delete(ctx, obj))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.GetAPIReader().Get(ctx, key, obj.DeepCopyObject().(client.Object)))
	}).Should(BeTrue()) //nolint:forcetypeassert // a copy of obj
	g.Expect(env.Create(ctx, next)).To(Succeed())
}
