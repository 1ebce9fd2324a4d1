package metalmachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// A provider sharded with --watch-filter leaves machines without its label alone, even when an
// available host (which needs no such label) wakes waiting machines; an unsharded provider claims.
func TestWatchFilterLeavesOtherShardsAlone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "shard").Name
	pool := map[string]string{"pool": "shard"}
	cluster := newCluster(t, g, ns, "shard")
	sharded := testOptions()
	sharded.WatchFilterValue = "other-shard"
	p := startProvider(t, sharded)
	data := dataSecret(g, ns, "shard-join", cluster.Name)
	newMachineDeployment(g, ns, "shard", cluster, data.Name, 1, pool)
	g.Eventually(func(g Gomega) { g.Expect(metalMachines(g, ns)).To(HaveLen(1)) }).Should(Succeed())
	registerHosts(g, ns, hostSpec{Name: "s1", Labels: pool})
	g.Consistently(func(g Gomega) {
		m := metalMachines(g, ns)[0]
		g.Expect(m.Finalizers).To(BeEmpty())
		g.Expect(m.Annotations).NotTo(HaveKey(infrav1.ReservedHostAnnotation))
		g.Expect(host(g, ns, "s1").Spec.ConsumerRef).To(BeNil())
	}, 3*time.Second).Should(Succeed())
	p.Stop()

	startProvider(t, testOptions())
	g.Eventually(func(g Gomega) {
		g.Expect(checkClaims(g, ns)).To(HaveLen(1))
	}).Should(Succeed())
}
