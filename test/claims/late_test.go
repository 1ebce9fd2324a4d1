package claims_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/pkg/claim"
)

// A claim is still on its way to the host while its machine is deleted and another controller lets the
// machine go: the write of a controller that died a moment ago and reaches the API server only now, or
// the write of a live replica whose cache did not show the deletion yet and that read the host after the
// deleting controller did. Neither may leave the host claimed by a machine that no longer exists. The
// host is left as it was found (no fence annotation), and it is claimed again by the next Machine.
func TestClaimOnItsWayWhileTheMachineIsDeletedNeverLeaks(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := env.CreateNamespace(ctx, t, "late-"+p.name()).Name
			inv := p.newInventory(t, ns)
			inv.add(t, g, "lt", "late", 1)
			cluster := provisionedCluster(t, g, p, ns, "late")
			data := dataSecret(g, ns, "late-join", cluster.Name)

			// A dead controller's write lands after the deletion let the machine go: the deletion fenced
			// the reserved host, and the write, based on a read before the fence, is refused.
			err := lateClaim(t, g, p, ns, cluster, data, "dead", false)
			g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the late claim was refused by the fence, got: %v", err)
			checkClaims(g, p, ns, false)
			inv.checkFree(g, "lt-0")
			checkUnfenced(g, p, ns)

			// A live replica read the host after the fence: its claim lands, it finds the machine gone
			// and releases the host at once.
			err = lateClaim(t, g, p, ns, cluster, data, "live", true)
			g.Expect(err).NotTo(HaveOccurred(), "the claim based on a read after the fence landed")
			g.Eventually(func(g Gomega) {
				g.Expect(checkClaims(g, p, ns, false)).To(BeEmpty())
				inv.checkFree(g, "lt-0")
			}).Should(Succeed())
			checkUnfenced(g, p, ns)

			// The host serves the next Machine.
			pr := p.start(t, startOptions{})
			newMachine(g, p, ns, "after", cluster, data, "late")
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				g.Expect(ms[0].Provisioned).To(BeTrue())
				g.Expect(checkClaims(g, p, ns, false)).To(HaveLen(1))
			}).Should(Succeed())
			pr.Stop()
			checkHolders(g, p, inv, ns)
		})
	}
}

// lateClaim runs one controller until its claim of a host for a new Machine named name is about to be
// sent, and holds that write. It deletes the Machine, lets a second controller handle the deletion until
// the infrastructure machine is gone, and then sends the held write. When live, the first controller goes
// on after its write, and the write carries the host's resourceVersion of that moment (a replica that
// read the host after the second controller was done with it). Otherwise the first controller is dead
// from the moment its write was held, and the write carries the resourceVersion at which the second
// controller read the host before its first write of it, or (when it wrote none) the current one: a claim
// based on a read as recent as the one the deletion decided on. lateClaim returns what the API server
// answered to the held write.
func lateClaim(t *testing.T, g *WithT, p provider, ns string, cluster *clusterv1.Cluster, data, name string, live bool) error {
	t.Helper()
	ctx := context.Background()
	hc := &holdingClient{match: p.step, live: live, held: make(chan struct{}), release: make(chan struct{}), sent: make(chan error, 1)}
	a := p.start(t, startOptions{client: func(c client.Client) client.Client { hc.Client = c; return hc }})
	newMachine(g, p, ns, name, cluster, data, "late")
	select {
	case <-hc.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the first controller never claimed a host for %s", name)
	}
	if !live {
		a.Kill()
	}
	g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	// The second controller starts when the deletion has reached the infrastructure machine, so that it
	// sees the machine being deleted, as a replica whose cache is ahead of the first one's.
	g.Eventually(func(g Gomega) {
		ms := p.machines(g, ns)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].Deleting).To(BeTrue())
		g.Expect(ms[0].Reserved).NotTo(BeEmpty())
	}).Should(Succeed())
	rc := &readVersionClient{isHost: func(o client.Object) bool { return p.step(o) != "" }}
	b := p.start(t, startOptions{client: func(c client.Client) client.Client { rc.Client = c; return rc }})
	g.Eventually(func(g Gomega) { g.Expect(p.machines(g, ns)).To(BeEmpty()) }).Should(Succeed())
	b.Stop()
	if !live {
		hc.readVersion = rc.first()
	}
	close(hc.release)
	var err error
	select {
	case err = <-hc.sent:
	case <-time.After(30 * time.Second):
		t.Fatalf("the held claim of %s was never sent", name)
	}
	if live {
		// The first controller confirms its claim against the machine, finds it gone and releases.
		g.Eventually(func(g Gomega) { g.Expect(checkClaims(g, p, ns, false)).To(BeEmpty()) }).Should(Succeed())
	}
	a.Stop()
	return err
}

// readVersionClient remembers the resourceVersion its first update of a host was based on.
type readVersionClient struct {
	client.Client
	isHost func(client.Object) bool
	mu     sync.Mutex
	rv     string
}

// Update implements client.Writer.
func (c *readVersionClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.mu.Lock()
	if c.rv == "" && c.isHost(obj) {
		c.rv = obj.GetResourceVersion()
	}
	c.mu.Unlock()
	return c.Client.Update(ctx, obj, opts...)
}

func (c *readVersionClient) first() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rv
}

// checkUnfenced asserts that no host of ns kept the fence annotation.
func checkUnfenced(g *WithT, p provider, ns string) {
	for _, h := range p.hosts(g, ns) {
		g.Expect(h.Annotations).NotTo(HaveKey(claim.FenceAnnotation), "host %s", h.Name)
	}
}

// holdingClient holds the provider's first claim write until release is closed, then sends it on a
// context of its own, as a request already on the wire that outlives its sender, with readVersion as its
// resourceVersion ("": the host's current one, a conflict with another writer retried on a fresh read);
// sent receives the answer. A dead provider (not live) is killed when its write is held: it gets
// errKilled back, and every other write of it fails.
type holdingClient struct {
	killableClient
	match       func(client.Object) string
	live        bool
	readVersion string
	held        chan struct{}
	release     chan struct{}
	sent        chan error

	once sync.Once
}

// Update implements client.Writer.
func (c *holdingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if c.isDead() {
		return errKilled
	}
	first := false
	if c.match(obj) == "claim" {
		c.once.Do(func() { first = true })
	}
	if !first {
		return c.Client.Update(ctx, obj, opts...)
	}
	if !c.live {
		c.kill()
	}
	close(c.held)
	<-c.release
	err := c.send(obj, opts...)
	c.sent <- err
	if !c.live {
		return errKilled
	}
	return err
}

// send writes the held claim obj.
func (c *holdingClient) send(obj client.Object, opts ...client.UpdateOption) error {
	ctx := context.Background()
	if c.readVersion != "" {
		obj.SetResourceVersion(c.readVersion)
		return c.Client.Update(ctx, obj, opts...)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := obj.DeepCopyObject().(client.Object) //nolint:forcetypeassert // a copy of obj has obj's type
		if err := env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		return c.Client.Update(ctx, obj, opts...)
	})
}

// A machine vanishes while it holds a host, without its deletion releasing it: kube-apiserver deleted it
// although its finalizer had been added a moment before (kubernetes/kubernetes#77988), or an operator
// removed the finalizer by hand. The next controller releases the host, as the provider leaves a host
// whose cleanup never ran, with a Warning Event on the host; the host then serves the next Machine.
func TestClaimThatOutlivedItsMachineIsReleased(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := env.CreateNamespace(ctx, t, "orphan-"+p.name()).Name
			inv := p.newInventory(t, ns)
			inv.add(t, g, "or", "orphan", 1)
			cluster := provisionedCluster(t, g, p, ns, "orphan")
			data := dataSecret(g, ns, "orphan-join", cluster.Name)
			pr := p.start(t, startOptions{})
			newMachine(g, p, ns, "gone", cluster, data, "orphan")
			var m machineView
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				m = ms[0]
				g.Expect(m.Provisioned).To(BeTrue())
			}, 2*time.Minute).Should(Succeed())
			pr.Stop()

			// The Machine is deleted while no controller runs, and the operator removes the provider's
			// finalizer: the infrastructure machine is gone, its host still claimed.
			g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}})).To(Succeed())
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				g.Expect(ms[0].Deleting).To(BeTrue())
			}).Should(Succeed())
			removeFinalizers(g, p, ns, m.Name)
			g.Eventually(func(g Gomega) { g.Expect(p.machines(g, ns)).To(BeEmpty()) }).Should(Succeed())
			orphans := orphanClaims(g, p, ns)
			g.Expect(orphans).To(HaveKey(m.HostRef))

			pr = p.start(t, startOptions{})
			expectOrphansReleased(g, p, inv, ns, orphans)
			g.Eventually(func(g Gomega) {
				events := &corev1.EventList{}
				g.Expect(env.List(ctx, events, client.InNamespace(ns))).To(Succeed())
				g.Expect(events.Items).To(ContainElement(And(
					HaveField("Reason", claim.HostOrphanReleasedEvent), HaveField("Type", corev1.EventTypeWarning),
					HaveField("InvolvedObject.Name", m.HostRef), HaveField("Message", ContainSubstring(m.Name)))))
			}).Should(Succeed())

			newMachine(g, p, ns, "next", cluster, data, "orphan")
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				g.Expect(ms[0].Provisioned).To(BeTrue())
				g.Expect(ms[0].HostRef).To(Equal(m.HostRef))
			}, 2*time.Minute).Should(Succeed())
			pr.Stop()
			checkHolders(g, p, inv, ns)
		})
	}
}

// removeFinalizers removes every finalizer of the infrastructure machine name, as an operator would.
func removeFinalizers(g Gomega, p provider, ns, name string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o := p.newMachineObject()
		if err := env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
			return err
		}
		o.SetFinalizers(nil)
		return env.Update(context.Background(), o)
	})).To(Succeed())
}
