package sshhost

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// laggingCache serves the host as it was before the controller's last write while behind is set, as a
// manager's cache does until the watch event of that write arrives. The API server is a fake here: a
// real cache's lag cannot be held still for a test.
type laggingCache struct {
	client.Client
	behind *infrav1.YonderSSHHost
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if h, ok := obj.(*infrav1.YonderSSHHost); ok && c.behind != nil && key == client.ObjectKeyFromObject(c.behind) {
		c.behind.DeepCopyInto(h)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// noDialer fails the test on any SSH connection: the host in these tests is probed already.
type noDialer struct{ t *testing.T }

func (d noDialer) Dial(context.Context, sshexec.Target) (sshexec.Executor, error) {
	d.t.Error("the host was probed over SSH again")
	return nil, errors.New("no SSH in this test")
}

// A pass on a cache that does not show the controller's own last write of the host writes nothing and
// comes back soon; once the cache shows the write, the host's status is not written again. Before, such
// a pass sent its status patch locked to the stale resourceVersion (refused) and then once more through
// CAPI's patch helper from the stale base: TestProvisioningWritesEachObjectOncePerStep saw up to 8 host
// status patches where each of its 3 steps writes one.
func TestPassOnCacheBehindOwnWriteWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "u"},
		Status: infrav1.YonderSSHMachineStatus{HostRef: "h", Bootstrap: &infrav1.BootstrapStatus{RunID: "u", Phase: infrav1.BootstrapPhaseRunning}}}
	h := &infrav1.YonderSSHHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h", Finalizers: []string{infrav1.HostFinalizer}, Labels: map[string]string{clusterctlv1.ClusterctlMoveLabel: ""}},
		Spec:       infrav1.YonderSSHHostSpec{ConsumerRef: &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "m", UID: "u"}},
		Status: infrav1.YonderSSHHostStatus{Phase: infrav1.HostPhaseClaimed, LastProbeTime: ptr.To(metav1.Now()),
			Conditions: []metav1.Condition{{Type: infrav1.YonderSSHHostReachableCondition, Status: metav1.ConditionTrue, Reason: infrav1.YonderSSHHostProbedReason, LastTransitionTime: metav1.Now()}}},
	}
	writes := 0
	count := interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m, h).WithStatusSubresource(m, h).WithInterceptorFuncs(count).Build()
	cache := &laggingCache{Client: api}
	r := &Reconciler{Client: cache, Dialer: noDialer{t}, ProbeInterval: time.Hour}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	before := &infrav1.YonderSSHHost{}
	g.Expect(api.Get(ctx, req.NamespacedName, before)).To(Succeed())

	_, err := r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(Equal(1), "the bootstrap started: Provisioning, with the Ready summary in the same request")

	// Woken again (the machine was written) while the cache still shows the host before that write.
	cache.behind = before
	res, err := r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(Equal(1), "nothing written from a cache behind the controller's own write")
	g.Expect(res.RequeueAfter).To(Equal(claim.StaleRetry))

	cache.behind = nil
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(Equal(1), "the cache shows the write: nothing left to write")
	got := &infrav1.YonderSSHHost{}
	g.Expect(api.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(infrav1.HostPhaseProvisioning))

	// Another writer's change (a label) is newer than this controller's write: never skipped.
	got.Labels["rack"] = "b"
	g.Expect(api.Update(ctx, got)).To(Succeed())
	m.Status.Initialization.Provisioned = ptr.To(true)
	g.Expect(api.Status().Update(ctx, m)).To(Succeed())
	res, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).NotTo(Equal(claim.StaleRetry))
	g.Expect(api.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(infrav1.HostPhaseProvisioned))
}

// A host whose claim its machine has not recorded yet (the machine's pass is between the claim and its
// status write) writes nothing: the machine's write wakes it, and it writes the phase the hand-off has
// reached then, once. Before, it wrote Claimed and then Provisioning a moment later. A machine that
// never writes holds the host's status back for HandOffWait at most.
func TestClaimNotYetRecordedByItsMachineWaitsForIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "u"}}
	ref := &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "m", UID: "u"}
	h := &infrav1.YonderSSHHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h", Finalizers: []string{infrav1.HostFinalizer}, Labels: map[string]string{clusterctlv1.ClusterctlMoveLabel: ""}},
		Spec:       infrav1.YonderSSHHostSpec{ConsumerRef: ref},
		Status: infrav1.YonderSSHHostStatus{Phase: infrav1.HostPhaseAvailable, LastProbeTime: ptr.To(metav1.Now()),
			Conditions: []metav1.Condition{{Type: infrav1.YonderSSHHostReachableCondition, Status: metav1.ConditionTrue, Reason: infrav1.YonderSSHHostProbedReason, LastTransitionTime: metav1.Now()}}},
	}
	writes := 0
	count := interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m, h).WithStatusSubresource(m, h).WithInterceptorFuncs(count).Build()
	r := &Reconciler{Client: api, Dialer: noDialer{t}, ProbeInterval: time.Hour}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}

	res, err := r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(BeZero(), "nothing written while the machine has not recorded the claim")
	g.Expect(res.RequeueAfter).To(Equal(HandOffWait), "the host looks again should the machine's write not wake it")

	// A machine that never records the claim (paused, failing) holds the host's status back for
	// HandOffWait at most: then the host writes Claimed.
	r.handOffs.Store(req.NamespacedName, time.Now().Add(-HandOffWait))
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(Equal(1))
	claimed := &infrav1.YonderSSHHost{}
	g.Expect(api.Get(ctx, req.NamespacedName, claimed)).To(Succeed())
	g.Expect(claimed.Status.Phase).To(Equal(infrav1.HostPhaseClaimed))

	// The machine's pass records the claim with the bootstrap's start; that write wakes the host.
	m.Status.HostRef = "h"
	m.Status.Bootstrap = &infrav1.BootstrapStatus{RunID: "u", Phase: infrav1.BootstrapPhaseStarting}
	g.Expect(api.Status().Update(ctx, m)).To(Succeed())
	writes = 0
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes).To(Equal(1))
	got := &infrav1.YonderSSHHost{}
	g.Expect(api.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(infrav1.HostPhaseProvisioning))
	g.Expect(got.Status.ConsumerRef).To(Equal(ref))

	// A machine that records the claim without handing off (its host unreachable, say) shows as Claimed.
	got.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: "m2", UID: "u2"}
	g.Expect(api.Update(ctx, got)).To(Succeed())
	m2 := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m2", UID: "u2"}}
	g.Expect(api.Create(ctx, m2)).To(Succeed())
	m2.Status.HostRef = "h"
	g.Expect(api.Status().Update(ctx, m2)).To(Succeed())
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(infrav1.HostPhaseClaimed))
}
