package metalmachine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalmachine"
	"github.com/yonder-dev/yonder/pkg/managercache"
)

// crashPoint names a BareMetalHost write of the machine reconciler; the provider dies right before
// (after=false) or right after (after=true) it.
type crashPoint struct {
	name  string
	after bool
	match func(h *metal3v1.BareMetalHost) bool
}

// crashingClient lets every call through until the armed write, then performs it or not, kills the
// provider and fails the call, as a process that dies at that instant.
type crashingClient struct {
	client.Client
	point crashPoint
	once  sync.Once
	kill  func()
	fired chan struct{}
}

func (c *crashingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	h, ok := obj.(*metal3v1.BareMetalHost)
	if !ok || !c.point.match(h) {
		return c.Client.Update(ctx, obj, opts...)
	}
	hit := false
	c.once.Do(func() { hit = true })
	if !hit {
		return errors.New("killed")
	}
	if c.point.after {
		if err := c.Client.Update(ctx, obj, opts...); err != nil {
			c.once = sync.Once{}
			return err
		}
	}
	c.kill()
	close(c.fired)
	return errors.New("killed")
}

// startCrashingProvider runs the machine reconciler with a client that kills the provider at p.
func startCrashingProvider(t *testing.T, p crashPoint) (*provider, chan struct{}) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme: env.GetScheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Client: managercache.ClientOptions(),
	})
	if err != nil {
		t.Fatalf("failed to create provider manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cc := &crashingClient{Client: mgr.GetClient(), point: p, kill: cancel, fired: make(chan struct{})}
	if err := (&metalmachine.Reconciler{Client: cc, APIReader: mgr.GetAPIReader()}).SetupWithManager(ctx, mgr, testOptions().ControllerOptions(4)); err != nil {
		cancel()
		t.Fatalf("failed to set up reconciler: %v", err)
	}
	pr := &provider{cancel: cancel, done: make(chan error, 1)}
	go func() { pr.done <- mgr.Start(ctx) }()
	t.Cleanup(pr.stop)
	return pr, cc.fired
}

// The provider is killed right before and right after each of its writes to a host, in lifecycle order:
// the claim (after the reservation on the machine, before the consumerRef; after the consumerRef, before
// the machine records it), the image + user data hand-off, while the host provisions, the withdrawal on
// delete, and the release (after the consumerRef is cleared, before the finalizer goes). After each
// death a fresh provider resumes. At every point no Machine holds two hosts, no host is claimed by a
// Machine that is gone, no host is provisioned twice for one Machine, and at the end a host is free,
// clean and available, and a new Machine gets one again.
func TestControllerKilledAtEveryStepNeverLeaksOrDoubleClaims(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "crash").Name
	pool := map[string]string{"pool": "crash"}
	registerHosts(g, ns, hostSpec{name: "x1", labels: pool}, hostSpec{name: "x2", labels: pool}, hostSpec{name: "x3", labels: pool})
	sim := simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "crash")
	data := dataSecret(g, ns, "crash-join", cluster.Name)

	claim := func(h *metal3v1.BareMetalHost) bool {
		return h.Spec.ConsumerRef != nil && h.Spec.Image == nil && !h.Spec.Online
	}
	handOff := func(h *metal3v1.BareMetalHost) bool { return h.Spec.ConsumerRef != nil && h.Spec.Image != nil }
	withdraw := func(h *metal3v1.BareMetalHost) bool {
		return h.Spec.ConsumerRef != nil && h.Spec.Image == nil && h.Spec.UserData == nil && h.Status.Provisioning.State != metal3v1.StateAvailable
	}
	release := func(h *metal3v1.BareMetalHost) bool { return h.Spec.ConsumerRef == nil }

	invariants := func() {
		checkClaims(g, ns, false)
		for h, byConsumer := range sim.provisionings() {
			for uid, n := range byConsumer {
				g.Expect(n).To(Equal(1), "host %s provisioned %d times for machine %s", h, n, uid)
			}
		}
	}
	die := func(p crashPoint) {
		pr, fired := startCrashingProvider(t, p)
		select {
		case <-fired:
		case <-time.After(60 * time.Second):
			t.Fatalf("crash point %s was never reached", p.name)
		}
		pr.stop()
		t.Logf("killed %s", p.name)
		invariants()
	}

	md := newMachineDeployment(g, ns, "crash", cluster, data.Name, 1, pool)
	die(crashPoint{name: "before the claim", match: claim})
	g.Expect(checkClaims(g, ns, false)).To(BeEmpty())
	m := metalMachines(g, ns)[0]
	g.Expect(m.Annotations).To(HaveKey(infrav1.ReservedHostAnnotation), "the choice was recorded before the claim")
	reserved := m.Annotations[infrav1.ReservedHostAnnotation]

	die(crashPoint{name: "after the claim", after: true, match: claim})
	claims := checkClaims(g, ns, false)
	g.Expect(claims).To(HaveKeyWithValue(string(m.UID), reserved), "the claim resumed with the reserved host")
	g.Expect(metalMachines(g, ns)[0].Annotations).NotTo(HaveKey(infrav1.HostAnnotation), "the machine did not record it before dying")

	sim.setHold(true)
	die(crashPoint{name: "after the hand-off", after: true, match: handOff})
	g.Expect(host(g, ns, reserved).Spec.Image).NotTo(BeNil())

	// Killed while the host provisions: a fresh provider picks up the same host.
	p := startProvider(t, testOptions())
	g.Eventually(func(g Gomega) {
		mm := metalMachines(g, ns)[0]
		g.Expect(mm.Annotations).To(HaveKeyWithValue(infrav1.HostAnnotation, reserved))
		g.Expect(mm.Annotations).To(HaveKey(metalmachine.BlockMoveAnnotation))
		g.Expect(condition(&mm, infrav1.HostProvisionedCondition)).To(HaveField("Reason", infrav1.HostProvisioningReason))
	}).Should(Succeed())
	p.stop()
	invariants()
	sim.setHold(false)
	p = startProvider(t, testOptions())
	g.Eventually(func(g Gomega) {
		mm := metalMachines(g, ns)[0]
		g.Expect(mm.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		g.Expect(mm.Spec.ProviderID).To(Equal("yonder-metal://" + ns + "/" + reserved))
	}).Should(Succeed())
	p.stop()
	invariants()

	sim.setHold(true) // deprovisioning is not held; provisioning of a new machine would be
	scale(g, md, 0)
	die(crashPoint{name: "after the withdrawal", after: true, match: withdraw})
	g.Expect(checkClaims(g, ns, true)).To(HaveKeyWithValue(string(m.UID), reserved), "the host stays claimed while it deprovisions")
	g.Eventually(func(g Gomega) {
		g.Expect(host(g, ns, reserved).Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	}).Should(Succeed())
	die(crashPoint{name: "after the release", after: true, match: release})
	g.Expect(metalMachines(g, ns)).To(HaveLen(1), "the finalizer was not removed before dying")

	startProvider(t, testOptions())
	g.Eventually(func(g Gomega) {
		g.Expect(metalMachines(g, ns)).To(BeEmpty())
		g.Expect(checkClaims(g, ns, false)).To(BeEmpty())
	}).Should(Succeed())
	for _, h := range hostList(g, ns) {
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Spec.Image).To(BeNil())
		g.Expect(h.Spec.UserData).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	}
	sim.setHold(false)
	scale(g, md, 2)
	g.Eventually(func(g Gomega) {
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(2))
		for _, mm := range metalMachines(g, ns) {
			g.Expect(ptr.Deref(mm.Status.Initialization.Provisioned, false)).To(BeTrue())
		}
		g.Expect(checkClaims(g, ns, false)).To(HaveLen(2))
	}).Should(Succeed())
	invariants()
}
