package metalmachine_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/harness"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// parallel runs f(i) for i in [0,n) on 10 workers.
func parallel(n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}

// BenchmarkClaim200Of1000 measures claiming and handing off hosts for a MachineDeployment of 200 (default;
// YONDER_BENCH_MACHINES) against 1,000 available BareMetalHosts (YONDER_BENCH_HOSTS) in 10 failure domains,
// with the real CAPI controllers: wall time from the MachineDeployment's creation until every
// YonderMetalMachine's host has its image and user data, and the provider's API requests per Machine. The
// baseline, measured in the same run on the same hosts, is the least API work a claim needs without any
// controller: per Machine one uncached read of a host, the consumerRef update and the hand-off update,
// on 10 workers.
func BenchmarkClaim200Of1000(b *testing.B) {
	machines, hosts := benchsize.Pick(200, 4), benchsize.Pick(1000, 8) // tiny in the test suite
	if v, err := strconv.Atoi(os.Getenv("YONDER_BENCH_MACHINES")); err == nil && v > 0 {
		machines = v
	}
	if v, err := strconv.Atoi(os.Getenv("YONDER_BENCH_HOSTS")); err == nil && v >= machines {
		hosts = v
	}
	for i := 0; i < b.N; i++ {
		g := NewWithT(b)
		ctx := context.Background()
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
		g.Expect(env.Create(ctx, nsObj)).To(Succeed())
		ns := nsObj.Name
		t0 := time.Now()
		parallel(hosts, func(j int) {
			registerHosts(g, ns, hostSpec{Name: fmt.Sprintf("h%04d", j), FailureDomain: fmt.Sprintf("fd%d", j%10), Labels: map[string]string{"pool": "bench"}})
		})
		b.Logf("registered %d hosts in %s", hosts, time.Since(t0).Round(time.Millisecond))

		baseWall, baseCount := claimBaseline(g, ns, machines)
		provWall, created, provReq := claimWithProvider(b, g, ns, machines)
		claims := checkClaims(g, ns)
		g.Expect(claims).To(HaveLen(machines))
		perFD := map[string]int{}
		for _, h := range hostList(g, ns) {
			if h.Spec.ConsumerRef != nil {
				perFD[h.Labels[infrav1.FailureDomainLabel]]++
			}
		}

		b.ReportMetric(provWall.Seconds(), "s-to-handed-off")
		b.ReportMetric(float64(provReq)/float64(machines), "apireq/machine")
		fmt.Printf("\nBare-metal provider, %d Machines claiming from %d BareMetalHosts (run %d of %d)\n", machines, hosts, i+1, b.N)
		fmt.Printf("%-40s %12s %12s %12s\n", "", "baseline", "provider", "ratio")
		fmt.Printf("%-40s %12.2f %12.2f %11.2fx\n", "time to all claimed and handed off (s)", baseWall.Seconds(), provWall.Seconds(), provWall.Seconds()/baseWall.Seconds())
		fmt.Printf("%-40s %12.1f %12.1f %11.2fx\n", "API requests per Machine", float64(baseCount)/float64(machines), float64(provReq)/float64(machines),
			float64(provReq)/float64(baseCount))
		fmt.Printf("%-40s %12s %12.2f\n", "  of which CAPI creating the machines (s)", "-", created.Seconds())
		fmt.Printf("claimed hosts per failure domain: %v\n", perFD)
	}
}

// claimBaseline is the least API work claiming and handing off hosts needs without any controller: per
// Machine one uncached read of a host, the consumerRef update and the hand-off update, on 10 workers. It
// returns the wall time and the requests; the hosts are given back afterwards (not measured).
func claimBaseline(g *WithT, ns string, machines int) (time.Duration, int64) {
	ctx := context.Background()
	// Baseline: the essential writes, no controller.
	baseCfg, baseReq := harness.CountRequests(env.Config)
	baseCfg.QPS, baseCfg.Burst = 200, 400
	bc, err := client.New(baseCfg, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	parallel(machines, func(j int) {
		key := client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("h%04d", j)}
		h := &metal3v1.BareMetalHost{}
		g.Expect(bc.Get(ctx, key, h)).To(Succeed())
		h.Spec.ConsumerRef = &corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: "YonderMetalMachine", Namespace: ns, Name: fmt.Sprintf("m%d", j)}
		g.Expect(bc.Update(ctx, h)).To(Succeed())
		h.Spec.Image = &metal3v1.Image{URL: testImage().URL, Checksum: testImage().Checksum, ChecksumType: "md5", DiskFormat: ptr.To("qcow2")}
		h.Spec.UserData = &corev1.SecretReference{Name: "data", Namespace: ns}
		h.Spec.Online = true
		g.Expect(bc.Update(ctx, h)).To(Succeed())
	})
	baseWall, baseCount := time.Since(t0), baseReq.Load()
	parallel(machines, func(j int) { // not measured: give the hosts back
		g.Expect(retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			h := &metal3v1.BareMetalHost{}
			if err := bc.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("h%04d", j)}, h); err != nil {
				return err
			}
			h.Spec.ConsumerRef, h.Spec.Image, h.Spec.UserData, h.Spec.Online = nil, nil, nil, false
			return bc.Update(ctx, h)
		})).To(Succeed())
	})

	return baseWall, baseCount
}

// claimWithProvider times the provider with the real CAPI controllers claiming and handing off hosts for a
// MachineDeployment of machines; it returns the wall time, the part of it CAPI spent creating the
// machines, and the provider's requests.
func claimWithProvider(b *testing.B, g *WithT, ns string, machines int) (time.Duration, time.Duration, int64) {
	b.Helper()
	cluster := newCluster(b, g, ns, "bench")
	data := dataSecret(g, ns, "bench-join", cluster.Name)
	cfg, provReq := harness.CountRequests(env.Config)
	p := harness.StartProvider(b, cfg, env.GetScheme(), setup.Reconcilers(testOptions()))
	t0 := time.Now()
	newMachineDeployment(g, ns, "bench", cluster, data.Name, int32(machines), map[string]string{"pool": "bench"})
	// When CAPI has created the last YonderMetalMachine: the part of the wall time that is CAPI's.
	var created time.Duration
	g.Eventually(func(g Gomega) {
		if created == 0 && len(metalMachines(g, ns)) == machines {
			created = time.Since(t0)
		}
		handed := 0
		for _, m := range metalMachines(g, ns) {
			if c := condition(&m, infrav1.YonderMetalMachineHostProvisionedCondition); c != nil && c.Reason == infrav1.YonderMetalMachineHostProvisioningReason {
				handed++
			}
		}
		g.Expect(handed).To(Equal(machines))
	}, 20*time.Minute, time.Second).Should(Succeed())
	provWall := time.Since(t0)
	p.Stop()
	return provWall, created, provReq.Load()
}
