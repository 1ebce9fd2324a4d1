package metalmachine_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/cluster-api/util/test/builder"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/test/harness"
)

// Issue 16: `clusterctl move` with a provisioned metal Machine keeps its host claimed by the same Machine.
//
// A MachineDeployment of 1 claims one of two hosts of its pool and runs. The Cluster is then moved twice
// (the second move starts from a machine whose UID already is not its claim identity): each time the
// YonderMetalMachine, its Machine, MachineSet, MachineDeployment, the Cluster and its infrastructure, the
// Secrets and both BareMetalHosts (claimed and free) are recreated with new UIDs and without status, and a
// fresh provider takes over. After each move the machine holds the same host under its FIRST UID
// (spec.consumerRef.uid = the claim-id annotation), already while the host's status is not rebuilt yet; its
// providerID and host are unchanged, the free host stays free, and the CAPI Machine is Running again on the
// same Node. A watch of the hosts over both moves shows no second provisioning, no deprovisioning and no
// change of image, and no write of the recreated hosts' spec at all. Afterwards another machine whose
// selector matches only the held host finds no host, and a machine created with the held host's claim
// identity is refused.
//
// One apiserver plays both management clusters (see clusterctlMove for why and what differs).
func TestClusterctlMoveKeepsHostClaimedBySameMachine(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()

	// The hosts move only because the BareMetalHost CRD the release ships carries clusterctl's
	// move-hierarchy label (envtest installs the bare CRD, without the kustomization that adds it).
	k, err := os.ReadFile("../../config/crd/metal3/kustomization.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(k)).To(ContainSubstring(clusterctlv1.ClusterctlMoveHierarchyLabel + `: ""`))

	ns := env.CreateNamespace(ctx, t, "move").Name
	registerHosts(g, ns,
		hostSpec{Name: "m1", Labels: map[string]string{"pool": "move", "host": "m1"}},
		hostSpec{Name: "m2", Labels: map[string]string{"pool": "move", "host": "m2"}})
	sim := simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "moved")
	provider := startProvider(t, testOptions())
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "moved-join", cluster.Name)
	// No bootstrap provider runs here: clusterctl would move the data Secret as a child of its bootstrap
	// config. A Secret of its own moves with clusterctl's move label.
	p := client.MergeFrom(data.DeepCopy())
	data.Labels[clusterctlv1.ClusterctlMoveLabel] = ""
	g.Expect(env.Patch(ctx, data, p)).To(Succeed())
	newMachineDeployment(g, ns, "workers", cluster, data.Name, 1, map[string]string{"pool": "move"})
	machinesRunning(g, wlc, ns, 1)

	first := metalMachines(g, ns)[0]
	g.Expect(first.Annotations).To(HaveKeyWithValue(infrav1.ClaimIDAnnotation, string(first.UID)), "the claim identity is the first UID")
	held := host(g, ns, first.Status.HostRef)
	free := map[string]string{"m1": "m2", "m2": "m1"}[held.Name]
	g.Expect(held.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	capiMachine := capiMachineNames(g, ns)
	g.Expect(capiMachine).To(HaveLen(1))
	claimRef := &corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: hostpool.ConsumerKind, Namespace: ns, Name: first.Name, UID: first.UID}
	g.Expect(held.Spec.ConsumerRef).To(Equal(claimRef))
	stopWatch := watchHosts(t, ns)

	uids := []types.UID{first.UID}
	for move := 1; move <= 2; move++ {
		mv := startMove(t, g, ns, cluster.Name)
		g.Expect(mv.kinds()).To(ContainElements("Cluster", "YonderMetalCluster", builder.GenericControlPlaneKind, "MachineDeployment",
			"MachineSet", "Machine", "YonderMetalMachineTemplate", "YonderMetalMachine", "BareMetalHost", "Secret"))
		mv.deleteSource(g)
		// The source's provider has nothing left to reconcile; the target's is installed before the move.
		provider.Stop()
		provider = startProvider(t, testOptions())
		mv.createTarget(g)

		// Recreated: new UIDs, no status, the claim and the claim identity carried in spec and annotations.
		m := metalMachines(g, ns)[0]
		g.Expect(m.Name).To(Equal(first.Name))
		g.Expect(uids).NotTo(ContainElement(m.UID), "move %d recreates the YonderMetalMachine", move)
		uids = append(uids, m.UID)
		g.Expect(m.Status.Initialization.Provisioned).To(BeNil(), "clusterctl move drops status")
		h := host(g, ns, held.Name)
		g.Expect(h.Status.Provisioning.State).To(BeEmpty(), "clusterctl move drops status")
		g.Expect(h.Spec.ConsumerRef).To(Equal(claimRef))

		mv.unpause(g)
		reportControlPlaneInitialized(g, ns, cluster.Name)
		// The target provider sees the held host before the host controller has rebuilt its status: the
		// claim stands, nothing is handed over again and no other host is claimed.
		g.Eventually(func(g Gomega) {
			m := metalMachines(g, ns)[0]
			g.Expect(condition(&m, clusterv1.PausedCondition)).To(HaveField("Status", metav1.ConditionFalse), "%+v", m.Status.Conditions)
			g.Expect(condition(&m, infrav1.YonderMetalMachineHostClaimedCondition)).To(HaveField("Status", metav1.ConditionTrue), "%+v", m.Status.Conditions)
			g.Expect(condition(&m, infrav1.YonderMetalMachineHostProvisionedCondition)).To(And(
				HaveField("Reason", infrav1.YonderMetalMachineHostProvisioningReason),
				HaveField("Message", fmt.Sprintf("BareMetalHost %s is %q", held.Name, ""))), "%+v", m.Status.Conditions)
			g.Expect(m.Annotations).To(HaveKeyWithValue(infrav1.HostAnnotation, held.Name))
			g.Expect(m.Status.HostRef).To(Equal(held.Name))
		}).Should(Succeed())
		g.Expect(host(g, ns, free).Spec.ConsumerRef).To(BeNil())
		rebuildHostStatus(g, mv)

		machinesRunning(g, wlc, ns, 1)
		g.Expect(capiMachineNames(g, ns)).To(Equal(capiMachine), "move %d: the same Machine, no replacement", move)
		m = metalMachines(g, ns)[0]
		g.Expect(m.UID).To(Equal(uids[move]))
		g.Expect(m.Annotations).To(HaveKeyWithValue(infrav1.ClaimIDAnnotation, string(first.UID)), "move %d: the claim identity stays the first UID", move)
		g.Expect(m.Annotations).To(HaveKeyWithValue(infrav1.HostAnnotation, held.Name))
		g.Expect(m.Status.HostRef).To(Equal(held.Name))
		g.Expect(m.Spec.ProviderID).To(Equal(first.Spec.ProviderID))
		g.Expect(m.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		h = host(g, ns, held.Name)
		g.Expect(h.Spec.ConsumerRef).To(Equal(claimRef), "move %d: the host is claimed by the same machine, under its first UID", move)
		g.Expect(h.Spec.Image).To(Equal(held.Spec.Image))
		g.Expect(h.Spec.UserData).To(Equal(held.Spec.UserData))
		g.Expect(h.Spec.Online).To(BeTrue())
		g.Expect(h.Generation).To(Equal(int64(1)), "move %d: nobody wrote the recreated host's spec", move)
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(h.Status.Provisioning.Image).To(Equal(held.Status.Provisioning.Image))
		g.Expect(host(g, ns, free).Spec.ConsumerRef).To(BeNil(), "move %d: no other host is claimed", move)
		g.Expect(sim.Provisionings()).To(Equal(map[string]map[string]int{held.Name: {string(first.UID): 1}}), "move %d: provisioned once, before the first move", move)
	}

	// Every version of the hosts over both moves, as the apiserver's watch delivered them: the held host
	// is always claimed by the first UID, always has its image and is never anything but provisioned (or
	// without status, between its re-creation and the rebuild); the free host is never claimed.
	versions := stopWatch()
	recreated := map[string][]types.UID{}
	for _, v := range versions {
		if !slices.Contains(recreated[v.Name], v.UID) {
			recreated[v.Name] = append(recreated[v.Name], v.UID)
		}
		if v.Name == free {
			g.Expect(v.Consumer).To(BeNil(), "%+v", v)
			continue
		}
		g.Expect(v.Consumer).To(Equal(claimRef), "%+v", v)
		g.Expect(v.Image).To(Equal(held.Spec.Image.URL), "%+v", v)
		g.Expect(v.Online).To(BeTrue(), "%+v", v)
		g.Expect(v.State).To(BeElementOf(metal3v1.StateProvisioned, metal3v1.ProvisioningState("")), "%+v", v)
		if v.UID != held.UID {
			g.Expect(v.Generation).To(Equal(int64(1)), "%+v", v)
		}
	}
	g.Expect(recreated).To(HaveEach(HaveLen(3)), "the watch saw both hosts as created before the moves and by each move")
	g.Expect(slices.ContainsFunc(versions, func(v hostVersion) bool {
		_, marked := v.Annotations[clusterctlv1.DeleteForMoveAnnotation]
		return v.Name == held.Name && v.Event == watch.Deleted && marked
	})).To(BeTrue(), "the watch saw clusterctl's delete-for-move deletion")

	// Another machine of the Cluster whose selector matches only the held host finds no host.
	intruder := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Spec: clusterv1.MachineSpec{ClusterName: cluster.Name, Version: "v1.36.3", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: hostpool.ConsumerKind, Name: "intruder"}},
	}
	g.Expect(env.Create(ctx, intruder)).To(Succeed())
	g.Expect(env.Create(ctx, &infrav1.YonderMetalMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: intruder.Name, UID: intruder.UID, Controller: ptr.To(true)}}},
		Spec: infrav1.YonderMetalMachineSpec{Image: testImage(), HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"host": held.Name}}},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		m := &infrav1.YonderMetalMachine{}
		g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "intruder"}, m)).To(Succeed())
		c := condition(m, infrav1.YonderMetalMachineHostClaimedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineNoHostAvailableReason))
		g.Expect(m.Annotations).NotTo(HaveKey(infrav1.HostAnnotation))
		g.Expect(m.Annotations).NotTo(HaveKey(infrav1.ReservedHostAnnotation))
	}).Should(Succeed())
	// Nor can a machine take the claim identity the held host records: the webhook refuses it.
	err = env.Create(ctx, &infrav1.YonderMetalMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "impostor", Annotations: map[string]string{infrav1.ClaimIDAnnotation: string(first.UID)}},
		Spec:       infrav1.YonderMetalMachineSpec{Image: testImage()},
	})
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("metadata.annotations[" + infrav1.ClaimIDAnnotation + "]: FieldValueForbidden"))
	g.Consistently(func(g Gomega) {
		g.Expect(host(g, ns, held.Name).Spec.ConsumerRef).To(Equal(claimRef))
		g.Expect(host(g, ns, held.Name).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(host(g, ns, free).Spec.ConsumerRef).To(BeNil())
	}, 2*time.Second).Should(Succeed())
}

// capiMachineNames returns the names of the Machines of ns, uncached.
func capiMachineNames(g Gomega, ns string) []string {
	l := &clusterv1.MachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	out := []string{}
	for _, m := range l.Items {
		out = append(out, m.Name)
	}
	sort.Strings(out)
	return out
}

// reportControlPlaneInitialized stands in for the control plane provider on the target: the generic
// control plane's status went with the move, and its provider reports it again (as AttachedCluster does).
func reportControlPlaneInitialized(g *WithT, ns, cluster string) {
	g.Eventually(func() error {
		cp := &unstructured.Unstructured{}
		cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
		if err := env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster}, cp); err != nil {
			return err
		}
		_ = unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")
		return env.Status().Update(context.Background(), cp)
	}).Should(Succeed())
}

// rebuildHostStatus stands in for Yonder's host controller on the target: clusterctl move drops a host's
// status and the host controller rebuilds it from the state it keeps in annotations, without booting the
// host (baremetalhost.TestStatusRebuiltAfterMove). The simulator does not, so the status each host had
// before the move is written back.
func rebuildHostStatus(g *WithT, mv *clusterctlMove) {
	for _, u := range mv.objects("BareMetalHost") {
		before := &metal3v1.BareMetalHost{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, before)).To(Succeed())
		g.Eventually(func(g Gomega) {
			h := host(g, before.Namespace, before.Name)
			h.Status = before.Status
			g.Expect(env.Status().Update(context.Background(), h)).To(Succeed())
		}).Should(Succeed())
	}
}

// clusterctlMove does to one namespace what `clusterctl move -n <namespace>` does to it (CAPI v1.14.2,
// cmd/clusterctl/client/cluster: objectgraph.go for what moves, mover.go for how): the objects of the
// Cluster's hierarchy (owner references down from the Cluster, its Secrets named after it), those of the
// move-hierarchy CRDs (BareMetalHosts, free ones too) and those with the move label are found; the Cluster
// is paused (spec.paused) and every object waits without the block-move annotation; each object is
// created again, owners first, with its owner references pointing at the owners' new UIDs; the source
// objects are deleted in reverse order (the delete-for-move annotation replacing all annotations, the
// deletion, the finalizers removed); the target Cluster is unpaused.
//
// Why one apiserver: the suite's environment (test/envtest) cannot be started twice in one process (its
// CAPI ClusterCache controller registers a controller name that must be unique per process, and it sets
// CAPI's process-wide conversion hook to its own apiserver), and a bare second apiserver would lack the
// CAPI controllers and webhooks that the move hands the Machine back to. So the source and the target
// are the same namespace of the same apiserver, with the same names and new UIDs — what the target sees
// after a real move. What differs: the source objects are deleted before the target objects are created
// (same names), so the target's objects never coexist with the source's; the source's provider runs
// until its objects are gone and is then replaced by a fresh one (the target's), while CAPI's
// controllers and the host simulator serve both. The CRDs have a status subresource, so creating an
// object drops its status as creating it in another cluster does.
type clusterctlMove struct {
	c           client.Client
	ns, cluster string
	// groups are the objects to move, read after the pause, owners before the objects they own.
	groups [][]*unstructured.Unstructured
	newUID map[types.UID]types.UID
}

// moveKinds are the kinds clusterctl discovers in this namespace: CAPI's, the control plane's, this
// provider's, Metal3's and Secrets.
func moveKinds(g *WithT) []schema.GroupVersionKind {
	kinds := []schema.GroupVersionKind{builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind)}
	for _, o := range []client.Object{&clusterv1.Cluster{}, &clusterv1.MachineDeployment{}, &clusterv1.MachineSet{}, &clusterv1.Machine{},
		&infrav1.YonderMetalCluster{}, &infrav1.YonderMetalMachineTemplate{}, &infrav1.YonderMetalMachine{}, &metal3v1.BareMetalHost{}, &corev1.Secret{}} {
		gvk, err := env.GroupVersionKindFor(o)
		g.Expect(err).NotTo(HaveOccurred())
		kinds = append(kinds, gvk)
	}
	return kinds
}

// startMove discovers what moves, checks what clusterctl checks, pauses the Cluster, waits until
// nothing blocks the move and reads the objects to move.
func startMove(t *testing.T, g *WithT, ns, cluster string) *clusterctlMove {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	mv := &clusterctlMove{c: c, ns: ns, cluster: cluster, newUID: map[types.UID]types.UID{}}
	mv.discover(g)

	// checkProvisioningCompleted and checkClustersNotPaused. CAPI's Cluster controller copies the control
	// plane's initialization into the Cluster's status a moment after it is reported (on a loaded machine,
	// after the test has moved on): waited for, as a user waits for the Cluster before a move.
	cl := &clusterv1.Cluster{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, cl)).To(Succeed())
		g.Expect(cl.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cl.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
	}).Should(Succeed())
	g.Expect(ptr.Deref(cl.Spec.Paused, false)).To(BeFalse())
	machines := &clusterv1.MachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
	for _, m := range machines.Items {
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no Node: clusterctl refuses to move it", m.Name)
	}

	g.Expect(c.Patch(ctx, cl, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`)))).To(Succeed())
	// clusterctl waits for the block-move annotation to go, then creates every object in the target before
	// it deletes the first source object: ample time for the source's controllers to see the pause. This
	// waits until the provider has reported it, so a slow test machine cannot turn that into a race.
	g.Eventually(func(g Gomega) {
		for _, o := range mv.all() {
			cur := &metav1.PartialObjectMetadata{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), cur)).To(Succeed())
			g.Expect(cur.Annotations).NotTo(HaveKey(clusterctlv1.BlockMoveAnnotation), "%s %s", o.GetKind(), o.GetName())
		}
		for _, m := range metalMachines(g, ns) {
			g.Expect(condition(&m, clusterv1.PausedCondition)).To(HaveField("Status", metav1.ConditionTrue))
		}
	}).Should(Succeed())
	for _, group := range mv.groups {
		for i, o := range group {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), cur)).To(Succeed())
			group[i] = cur
		}
	}
	return mv
}

// discover finds the objects to move and orders them, as clusterctl's object graph does: each Cluster and
// each object of a move-hierarchy CRD with everything below it (through owner references, and from a
// Cluster to the Secrets without owner named after it), and the objects with the move label. Every object
// of the namespace must move: what clusterctl would leave in the source would still be here, in the
// "target".
func (mv *clusterctlMove) discover(g *WithT) {
	var objs []*unstructured.Unstructured
	for _, gvk := range moveKinds(g) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		g.Expect(mv.c.List(context.Background(), l, client.InNamespace(mv.ns))).To(Succeed())
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	}
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
	clusters := map[string]types.UID{}
	for _, o := range objs {
		if o.GetKind() == "Cluster" {
			clusters[o.GetName()] = o.GetUID()
		}
	}
	// owners are an object's owner references and, for a Secret without any, the Cluster it is named after.
	owners := func(o *unstructured.Unstructured) []types.UID {
		var out []types.UID
		for _, r := range o.GetOwnerReferences() {
			out = append(out, r.UID)
		}
		if o.GetKind() == "Secret" && len(out) == 0 {
			if name, _, err := secret.ParseSecretName(o.GetName()); err == nil && clusters[name] != "" {
				out = append(out, clusters[name])
			}
		}
		return out
	}
	tenant, moved := map[types.UID]bool{}, map[types.UID]bool{}
	for _, o := range objs {
		// BareMetalHost: the CRD's move-hierarchy label (checked by the test).
		tenant[o.GetUID()] = o.GetKind() == "Cluster" || o.GetKind() == "BareMetalHost"
		_, forced := o.GetLabels()[clusterctlv1.ClusterctlMoveLabel]
		moved[o.GetUID()] = tenant[o.GetUID()] || forced
	}
	for changed := true; changed; {
		changed = false
		for _, o := range objs {
			if tenant[o.GetUID()] {
				continue
			}
			for _, owner := range owners(o) {
				if tenant[owner] {
					tenant[o.GetUID()], moved[o.GetUID()], changed = true, true, true
					break
				}
			}
		}
	}
	var left []string
	for _, o := range objs {
		if !moved[o.GetUID()] {
			left = append(left, o.GetKind()+" "+o.GetName())
		}
		for _, owner := range owners(o) {
			g.Expect(moved).To(HaveKeyWithValue(owner, true), "%s %s has an owner that does not move", o.GetKind(), o.GetName())
		}
	}
	g.Expect(left).To(BeEmpty(), "objects clusterctl would not move")
	placed := map[types.UID]bool{}
	for {
		var group []*unstructured.Unstructured
		for _, o := range objs {
			if !placed[o.GetUID()] && !slices.ContainsFunc(owners(o), func(u types.UID) bool { return !placed[u] }) {
				group = append(group, o)
			}
		}
		if len(group) == 0 {
			break
		}
		for _, o := range group {
			placed[o.GetUID()] = true
		}
		mv.groups = append(mv.groups, group)
	}
	g.Expect(placed).To(HaveLen(len(objs)), "an ownership cycle")
}

func (mv *clusterctlMove) all() []*unstructured.Unstructured { return slices.Concat(mv.groups...) }

// kinds returns the kinds that move.
func (mv *clusterctlMove) kinds() []string {
	out := []string{}
	for _, o := range mv.all() {
		if !slices.Contains(out, o.GetKind()) {
			out = append(out, o.GetKind())
		}
	}
	return out
}

// objects returns the objects of kind as read before the move.
func (mv *clusterctlMove) objects(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range mv.all() {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// deleteSource deletes the source objects, dependents first, as clusterctl's deleteSourceObject does.
func (mv *clusterctlMove) deleteSource(g *WithT) {
	ctx := context.Background()
	deleteForMove := client.RawPatch(types.JSONPatchType, []byte(fmt.Sprintf(`[{"op": "add", "path":"/metadata/annotations", "value":{%q:""}}]`, clusterctlv1.DeleteForMoveAnnotation)))
	removeFinalizers := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":[]}}`))
	for i := len(mv.groups) - 1; i >= 0; i-- {
		for _, o := range mv.groups[i] {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			g.Expect(mv.c.Get(ctx, client.ObjectKeyFromObject(o), cur)).To(Succeed())
			g.Expect(mv.c.Patch(ctx, cur, deleteForMove)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			g.Expect(mv.c.Delete(ctx, cur)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			if len(cur.GetFinalizers()) > 0 {
				g.Expect(client.IgnoreNotFound(mv.c.Patch(ctx, cur, removeFinalizers))).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			}
		}
	}
	g.Eventually(func(g Gomega) {
		for _, o := range mv.all() {
			cur := &metav1.PartialObjectMetadata{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			err := mv.c.Get(ctx, client.ObjectKeyFromObject(o), cur)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}).Should(Succeed())
}

// createTarget creates the objects again, owners first, as clusterctl's createTargetObject does: the
// object as read, without resourceVersion, its owner references rebuilt with the owners' new UIDs.
func (mv *clusterctlMove) createTarget(g *WithT) {
	byUID := map[types.UID]*unstructured.Unstructured{}
	for _, o := range mv.all() {
		byUID[o.GetUID()] = o
	}
	for _, group := range mv.groups {
		for _, o := range group {
			obj := o.DeepCopy()
			obj.SetResourceVersion("")
			var refs []metav1.OwnerReference
			for _, r := range o.GetOwnerReferences() {
				owner := byUID[r.UID]
				refs = append(refs, metav1.OwnerReference{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(),
					UID: mv.newUID[r.UID], Controller: r.Controller, BlockOwnerDeletion: r.BlockOwnerDeletion})
			}
			obj.SetOwnerReferences(refs)
			if obj.GetName() != "" && obj.GetGenerateName() != "" {
				obj.SetGenerateName("")
			}
			g.Expect(mv.c.Create(context.Background(), obj)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			g.Expect(obj.GetUID()).NotTo(Equal(o.GetUID()))
			mv.newUID[o.GetUID()] = obj.GetUID()
		}
	}
}

// unpause resumes the target Cluster as clusterctl does (it drops the field).
func (mv *clusterctlMove) unpause(g *WithT) {
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: mv.ns, Name: mv.cluster}}
	g.Expect(mv.c.Patch(context.Background(), cl, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":null}}`)))).To(Succeed())
}

// hostVersion is one version of a BareMetalHost as a watch delivered it.
type hostVersion struct {
	Event       watch.EventType
	Name        string
	UID         types.UID
	Generation  int64
	Annotations map[string]string
	Consumer    *corev1.ObjectReference
	Image       string
	Online      bool
	State       metal3v1.ProvisioningState
}

// watchHosts records every version of the BareMetalHosts of ns that a watch delivers (across their
// deletion and re-creation), from now until the returned stop is called.
func watchHosts(t *testing.T, ns string) (stop func() []hostVersion) {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		seen []hostVersion
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := ""
		// One watch per call; a watch that fails to open or ends is opened again 50 ms later, until ctx ends.
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			w, err := wc.Watch(ctx, &metal3v1.BareMetalHostList{}, &client.ListOptions{Namespace: ns, Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				rv = ""
				return
			}
			defer w.Stop()
			for ev := range w.ResultChan() {
				h, ok := ev.Object.(*metal3v1.BareMetalHost)
				if !ok {
					rv = "" // an error (e.g. the version expired): start again from the current state
					continue
				}
				rv = h.ResourceVersion
				v := hostVersion{Event: ev.Type, Name: h.Name, UID: h.UID, Generation: h.Generation, Annotations: h.Annotations,
					Consumer: h.Spec.ConsumerRef, Online: h.Spec.Online, State: h.Status.Provisioning.State}
				if h.Spec.Image != nil {
					v.Image = h.Spec.Image.URL
				}
				mu.Lock()
				seen = append(seen, v)
				mu.Unlock()
			}
		}, 50*time.Millisecond)
	}()
	halt := func() { cancel(); <-done }
	t.Cleanup(halt)
	NewWithT(t).Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }).Should(BeNumerically(">", 0), "the watch started")
	return func() []hostVersion {
		halt()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
