package claims_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/harness"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// watchInvariants checks the claim invariants every 20 ms, uncached, until the returned stop is called;
// stop returns the first violation.
func watchInvariants(p provider, ns string) (stop func() error) {
	var (
		mu        sync.Mutex
		violation error
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait.UntilWithContext(ctx, func(context.Context) {
			cg := NewGomega(func(message string, _ ...int) {
				mu.Lock()
				if violation == nil {
					violation = fmt.Errorf("%s", message)
				}
				mu.Unlock()
			})
			checkClaims(cg, p, ns, true)
		}, 20*time.Millisecond)
	}()
	return func() error {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return violation
	}
}

// Two provider replicas run at once (as during a rolling update, or with leader election off) while a
// MachineDeployment of 6 competes for 4 hosts. Throughout, no machine ever holds two hosts and no host is
// handed to two machines (checked continuously, not only at the end); exactly 4 machines are provisioned
// and the other 2 report NoHostAvailable until 2 more hosts are registered. The providers retry slowly,
// so the 2 waiting machines get their hosts because the new hosts wake them (watches), not by polling.
func TestTwoConcurrentControllersNeverDoubleClaim(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) {
			g := NewWithT(t)
			ns := env.CreateNamespace(context.Background(), t, "twin-"+p.name()).Name
			inv := p.newInventory(t, ns)
			inv.add(t, g, "tw", "twin", 4)
			p.start(t, startOptions{slow: true})
			p.start(t, startOptions{slow: true})
			cluster := p.cluster(t, g, ns, "twin")
			data := dataSecret(g, ns, "twin-join", cluster.Name)
			stop := watchInvariants(p, ns)

			newMachineDeployment(g, p, ns, "twin", cluster, data, 6, "twin")
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(6))
				provisioned, waiting := 0, 0
				for _, m := range ms {
					if m.Provisioned {
						provisioned++
					} else if m.reason("HostClaimed") == "NoHostAvailable" {
						waiting++
					}
				}
				g.Expect(provisioned).To(Equal(4))
				g.Expect(waiting).To(Equal(2))
			}).Should(Succeed())
			// Stable: nothing more happens while no host is free.
			g.Consistently(func(g Gomega) { g.Expect(checkClaims(g, p, ns, false)).To(HaveLen(4)) }, 2*time.Second).Should(Succeed())

			inv.add(t, g, "tx", "twin", 2)
			g.Eventually(func(g Gomega) {
				for _, m := range p.machines(g, ns) {
					g.Expect(m.Provisioned).To(BeTrue(), "machine %s", m.Name)
				}
				g.Expect(checkClaims(g, p, ns, false)).To(HaveLen(6))
			}).Should(Succeed())
			g.Expect(stop()).NotTo(HaveOccurred())
			checkHolders(g, p, inv, ns)
		})
	}
}

// The provider is stopped at chosen and random points while a MachineDeployment scales up and down (24
// cycles): right after it claims a host, while a host provisions, while a machine is being deleted, or at
// once after starting. Stopping cancels its context, so in-flight writes (and SSH commands) are cut off
// mid-way, as when the process dies. After every stop the inventory holds no double claim and no host was
// provisioned twice for one machine. A claim of a machine that no longer exists can be left by a stop right
// after the claim (kube-apiserver may delete a machine whose finalizer was added a moment before: see
// pkg/claim/orphan.go); the next controller releases it. At the end every
// Machine is Running, each on its own host provisioned once for it, and every other host is free and
// clean.
func TestControllerRestartsNeverDoubleClaimOrLeak(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) { restartCycles(t, p) })
	}
}

// killPoint is a state to reach before a provider is stopped (nil: stop at once).
type killPoint struct {
	name  string
	state func(ms []machineView) bool
}

var killPoints = []killPoint{
	{"claimed", func(ms []machineView) bool {
		return slices.ContainsFunc(ms, func(m machineView) bool { return m.Host != "" && !m.Provisioned && !m.Deleting })
	}},
	{"provisioning", func(ms []machineView) bool {
		return slices.ContainsFunc(ms, func(m machineView) bool { return m.Host != "" && m.BlockMove && !m.Deleting })
	}},
	{"deleting", func(ms []machineView) bool {
		return slices.ContainsFunc(ms, func(m machineView) bool { return m.Deleting && m.Host != "" })
	}},
	{"immediately", nil},
}

func restartCycles(t *testing.T, p provider) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "restart-"+p.name()).Name
	inv := p.newInventory(t, ns)
	inv.add(t, g, "rs", "rs", 5)
	cluster := provisionedCluster(t, g, p, ns, "rs")
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	md := newMachineDeployment(g, p, ns, "rs", cluster, dataSecret(g, ns, "rs-join", cluster.Name), 0, "rs")

	// The seed chooses the kill points; YONDER_CLAIMS_SEED replays the ones a logged run chose.
	seed := time.Now().UnixNano()
	if v := os.Getenv("YONDER_CLAIMS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseInt(v, 10, 64)
		g.Expect(err).NotTo(HaveOccurred(), "YONDER_CLAIMS_SEED")
	}
	t.Logf("random seed %d (replay with YONDER_CLAIMS_SEED=%d)", seed, seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	replicas := []int32{3, 1, 4, 0, 2, 5, 1, 3}
	const cycles = 24
	prev := int32(0)
	orphans := map[string]hostView{}
	for i := range cycles {
		want := replicas[i%len(replicas)]
		harness.Scale(g, env, md, want)
		pr := p.start(t, startOptions{})
		expectOrphansReleased(g, p, inv, ns, orphans)
		// Scaling up can be stopped while claiming or provisioning, scaling down while deleting.
		choices := []int{0, 1, 3}
		if want < prev {
			choices = []int{2, 3}
		}
		prev = want
		kp := killPoints[choices[rnd.IntN(len(choices))]]
		if kp.state != nil {
			// Wait (bounded) for the kill point; a cycle whose work finished before reaching it still
			// restarts the controller, just not at that point.
			_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				return kp.state(p.machines(g, ns)), nil
			})
		}
		pr.Stop()
		t.Logf("cycle %d: replicas %d, stopped %s", i, want, kp.name)
		checkClaims(g, p, ns, true)
		if orphans = orphanClaims(g, p, ns); len(orphans) > 0 {
			t.Logf("cycle %d: claims that outlived their machines: %v", i, orphans)
		}
		checkProvisionedOnce(g, inv)
	}

	p.start(t, startOptions{})
	expectOrphansReleased(g, p, inv, ns, orphans)
	harness.Scale(g, env, md, 3)
	g.Eventually(func(g Gomega) {
		ensureNodes(g, wlc, p, ns)
		harness.ExpectMachinesRunning(g, env, ns, 3)
		g.Expect(p.machines(g, ns)).To(HaveLen(3))
		g.Expect(checkClaims(g, p, ns, false)).To(HaveLen(3))
		checkHolders(g, p, inv, ns)
	}, 3*time.Minute).Should(Succeed())
}

// The provider is killed right before and right after each of its writes to a host, in lifecycle order:
// the claim (after the reservation on the machine, before the consumer; after the consumer, before the
// machine records it), the hand-off where it is a host write, while the host provisions, the withdrawal
// where it is one, and the release (after the claim is cleared, before the finalizer goes). After each
// death a fresh provider resumes. At every point no machine holds two hosts, no host is claimed by a
// machine that is gone, no host is provisioned twice for one machine; at the end every host is free and
// clean, and new Machines get hosts again.
func TestControllerKilledAtEveryHostWriteNeverLeaksOrDoubleClaims(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) { killedAtEveryHostWrite(t, p) })
	}
}

func killedAtEveryHostWrite(t *testing.T, p provider) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "crash-"+p.name()).Name
	k := &killer{t: t, g: g, p: p, ns: ns, inv: p.newInventory(t, ns)}
	k.inv.add(t, g, "x", "crash", 3)
	cluster := provisionedCluster(t, g, p, ns, "crash")
	md := newMachineDeployment(g, p, ns, "crash", cluster, dataSecret(g, ns, "crash-join", cluster.Name), 1, "crash")
	m := k.claim()
	k.provision(m)
	k.release(md, m)
	harness.Scale(g, env, md, 2)
	g.Eventually(func(g Gomega) {
		ms := p.machines(g, ns)
		g.Expect(ms).To(HaveLen(2))
		for _, mm := range ms {
			g.Expect(mm.Provisioned).To(BeTrue())
		}
		g.Expect(checkClaims(g, p, ns, false)).To(HaveLen(2))
		checkHolders(g, p, k.inv, ns)
	}).Should(Succeed())
}

// killer kills one provider's controllers at its host writes.
type killer struct {
	t   *testing.T
	g   *WithT
	p   provider
	ns  string
	inv inventory
}

// die runs the provider until it reaches step (and performs it, when after), kills it there and checks
// the invariants.
func (k *killer) die(step string, after bool) {
	k.t.Helper()
	cc := newCrashingClient(k.p, step, after)
	pr := k.p.start(k.t, startOptions{client: func(c client.Client) client.Client { cc.Client = c; return cc }})
	select {
	case <-cc.fired:
	case <-time.After(60 * time.Second):
		k.t.Fatalf("the provider never reached the %s (after: %t)", step, after)
	}
	pr.Stop()
	k.t.Logf("killed at the %s (after: %t)", step, after)
	checkClaims(k.g, k.p, k.ns, false)
	checkProvisionedOnce(k.g, k.inv)
}

func (k *killer) has(step string) bool { return slices.Contains(k.p.steps(), step) }

// claim kills the provider right before and right after the claim: the reservation and the claim
// identity were recorded first, and the claim resumes with the reserved host.
func (k *killer) claim() machineView {
	g := k.g
	k.die("claim", false)
	g.Expect(checkClaims(g, k.p, k.ns, false)).To(BeEmpty())
	m := k.p.machines(g, k.ns)[0]
	g.Expect(m.Reserved).NotTo(BeEmpty(), "the choice was recorded before the claim")
	g.Expect(m.ClaimID).To(Equal(m.UID), "the claim identity was recorded with the choice")
	k.die("claim", true)
	g.Expect(checkClaims(g, k.p, k.ns, false)).To(HaveKeyWithValue(m.ClaimID, m.Reserved), "the claim resumed with the reserved host")
	g.Expect(k.p.machines(g, k.ns)[0].Host).To(BeEmpty(), "the machine did not record it before dying")
	return m
}

// provision kills the provider after the hand-off (where it is a host write) and while the host
// provisions; a fresh provider picks up the same host and provisions it once.
func (k *killer) provision(m machineView) {
	g := k.g
	k.inv.holdProvisioning(true)
	if k.has("handoff") {
		k.die("handoff", true)
	}
	pr := k.p.start(k.t, startOptions{})
	g.Eventually(func(g Gomega) {
		mm := k.p.machines(g, k.ns)[0]
		g.Expect(mm.Host).To(Equal(m.Reserved))
		g.Expect(mm.BlockMove).To(BeTrue(), "clusterctl move waits while the host provisions")
		g.Expect(mm.Provisioned).To(BeFalse())
	}).Should(Succeed())
	pr.Stop()
	checkClaims(g, k.p, k.ns, false)
	checkProvisionedOnce(g, k.inv)
	k.inv.holdProvisioning(false)
	pr = k.p.start(k.t, startOptions{})
	g.Eventually(func(g Gomega) {
		mm := k.p.machines(g, k.ns)[0]
		g.Expect(mm.Provisioned).To(BeTrue())
		g.Expect(mm.ProviderID).To(HaveSuffix("://" + k.ns + "/" + m.Reserved))
		g.Expect(mm.BlockMove).To(BeFalse())
	}).Should(Succeed())
	pr.Stop()
}

// release kills the provider after the withdrawal (where it is a host write) and after the release,
// before the finalizer goes; a fresh provider lets the machine go and every host is free and clean.
func (k *killer) release(md *clusterv1.MachineDeployment, m machineView) {
	g := k.g
	harness.Scale(g, env, md, 0)
	if k.has("withdraw") {
		k.die("withdraw", true)
		g.Expect(checkClaims(g, k.p, k.ns, true)).To(HaveKeyWithValue(m.ClaimID, m.Reserved), "the host stays claimed while it is withdrawn from")
	}
	k.die("release", true)
	g.Expect(k.p.machines(g, k.ns)).To(HaveLen(1), "the finalizer was not removed before dying")
	k.p.start(k.t, startOptions{})
	g.Eventually(func(g Gomega) {
		g.Expect(k.p.machines(g, k.ns)).To(BeEmpty())
		g.Expect(checkClaims(g, k.p, k.ns, false)).To(BeEmpty())
		for _, h := range k.p.hosts(g, k.ns) {
			k.inv.checkFree(g, h.Name)
		}
	}).Should(Succeed())
}

// clusterctl move recreates an infrastructure machine with a new UID and no status. The moved object still
// holds its host (its claim-id annotation matches the host's consumer) and finds what it handed over: it
// is provisioned again, with the same providerID, without provisioning the host a second time, and
// deleting it releases the host.
func TestMovedMachineKeepsItsClaim(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name(), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := env.CreateNamespace(ctx, t, "move-"+p.name()).Name
			inv := p.newInventory(t, ns)
			inv.add(t, g, "mv", "move", 2)
			pr := p.start(t, startOptions{})
			cluster := p.cluster(t, g, ns, "move")
			newMachine(g, p, ns, "mv", cluster, dataSecret(g, ns, "mv-join", cluster.Name), "move")
			var before machineView
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				before = ms[0]
				g.Expect(before.Provisioned).To(BeTrue())
				g.Expect(before.ClaimID).To(Equal(before.UID))
				g.Expect(before.BlockMove).To(BeFalse())
			}, 2*time.Minute).Should(Succeed())

			// The move: the controller stops, the object is deleted without its finalizer running and
			// created again from its metadata and spec, as clusterctl does.
			pr.Stop()
			p.recreate(g, ns, before.Name)
			p.start(t, startOptions{})
			g.Eventually(func(g Gomega) {
				ms := p.machines(g, ns)
				g.Expect(ms).To(HaveLen(1))
				g.Expect(ms[0].UID).NotTo(Equal(before.UID))
				g.Expect(ms[0].Provisioned).To(BeTrue())
				g.Expect(ms[0].ProviderID).To(Equal(before.ProviderID))
				g.Expect(ms[0].HostRef).To(Equal(before.HostRef))
			}, 2*time.Minute).Should(Succeed())
			g.Expect(checkClaims(g, p, ns, false)).To(Equal(map[string]string{before.UID: before.HostRef}), "the claim is kept, not made again")
			g.Expect(inv.provisionings(g)[before.HostRef]).To(Equal(map[string]int{before.UID: 1}), "the moved machine did not provision its host again")

			// Deleting the moved Machine releases the host it kept.
			g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mv"}})).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(checkClaims(g, p, ns, false)).To(BeEmpty())
				g.Expect(p.machines(g, ns)).To(BeEmpty())
			}, 2*time.Minute).Should(Succeed())
			inv.checkFree(g, before.HostRef)
		})
	}
}
