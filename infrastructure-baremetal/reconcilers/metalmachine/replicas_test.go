package metalmachine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// Two provider replicas run at once (as during a rolling update, or with leader election off) while a
// MachineDeployment of 6 competes for 4 hosts. Throughout, no Machine ever holds two hosts and no host is
// handed to two Machines (checked continuously, not only at the end); exactly 4 Machines are
// provisioned and the other 2 report NoHostAvailable until 2 more hosts are registered.
func TestTwoConcurrentControllersNeverDoubleClaim(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "twin").Name
	pool := map[string]string{"pool": "twin"}
	for i := 0; i < 4; i++ {
		registerHosts(g, ns, hostSpec{name: fmt.Sprintf("h%d", i), failureDomain: fmt.Sprintf("fd%d", i%2), labels: pool})
	}
	sim := simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "twin")
	startProvider(t, testOptions())
	startProvider(t, testOptions())
	data := dataSecret(g, ns, "twin-join", cluster.Name)

	// The invariant watcher: every 20ms, uncached.
	var (
		mu        sync.Mutex
		violation error
	)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		wait.UntilWithContext(wctx, func(context.Context) {
			cg := NewGomega(func(message string, _ ...int) {
				mu.Lock()
				if violation == nil {
					violation = fmt.Errorf("%s", message)
				}
				mu.Unlock()
			})
			checkClaims(cg, ns, true)
		}, 20*time.Millisecond)
	}()

	newMachineDeployment(g, ns, "twin", cluster, data.Name, 6, pool)
	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		g.Expect(ms).To(HaveLen(6))
		provisioned, waiting := 0, 0
		for _, m := range ms {
			if ptr.Deref(m.Status.Initialization.Provisioned, false) {
				provisioned++
			} else if c := condition(&m, infrav1.HostClaimedCondition); c != nil && c.Reason == infrav1.NoHostAvailableReason {
				waiting++
			}
		}
		g.Expect(provisioned).To(Equal(4))
		g.Expect(waiting).To(Equal(2))
	}).Should(Succeed())
	// Stable: nothing more happens while no host is free.
	g.Consistently(func(g Gomega) { g.Expect(checkClaims(g, ns, false)).To(HaveLen(4)) }, 2*time.Second).Should(Succeed())

	registerHosts(g, ns, hostSpec{name: "h4", failureDomain: "fd0", labels: pool}, hostSpec{name: "h5", failureDomain: "fd1", labels: pool})
	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		for _, m := range ms {
			g.Expect(m.Status.Initialization.Provisioned).To(HaveValue(BeTrue()), "machine %s", m.Name)
		}
		g.Expect(checkClaims(g, ns, false)).To(HaveLen(6))
	}).Should(Succeed())
	stopWatch()
	<-watched
	mu.Lock()
	g.Expect(violation).NotTo(HaveOccurred())
	mu.Unlock()
	for h, byConsumer := range sim.provisionings() {
		g.Expect(byConsumer).To(HaveLen(1), "host %s was provisioned for exactly one machine", h)
	}
}
