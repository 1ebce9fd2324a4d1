package baremetalhost_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

func maxRSSMiB() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024
}

// BenchmarkRegisterInspectHosts registers and inspects an inventory of BareMetalHosts (10,000, the
// size of issue 21's goal; BENCH_HOSTS overrides, e.g. 1000 for a 1-minute run) on emulated BMCs — one emulator process serving every system, in-memory power —
// until all are available. Baseline, same run: the same Redfish work (connect with a session, read the
// system and its inventory, log out) done directly by 10 workers without the controller or the API
// server. Reported: wall time of each, the ratio, this process's CPU (controller + emulator; the
// baseline's CPU is the emulator + client share), peak RSS, Redfish requests per host, and in the log
// the controller's requests per host by operation (yonder_bmc_requests_total).
func BenchmarkRegisterInspectHosts(b *testing.B) {
	n := envInt("BENCH_HOSTS", benchsize.Pick(10000, 4))
	g := NewWithT(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		sim := startSim(b, redfishsim.NewMemoryDriver())
		for j := 0; j < n; j++ {
			sim.AddSystem(redfishsim.DefaultSystem(fmt.Sprintf("s%04d", j), fmt.Sprintf("52:54:01:00:%02x:%02x", j>>8, j&0xff)))
		}

		baseWall, baseCPU, baseReq := inspectBaseline(g, sim, n)

		// The controller.
		ns := env.CreateNamespace(ctx, b, "bmh-bench").Name
		runtime.GC()
		r := testReconciler(nil)
		r.PowerPollInterval = time.Hour // measure registration and inspection, not the power poll
		// The inventory is written first, then the controller starts: the figure is the controller's.
		t0 := time.Now()
		for j := 0; j < n; j++ {
			id := fmt.Sprintf("s%04d", j)
			newHost(g, ns, "h"+id, sim, id, fmt.Sprintf("52:54:01:00:%02x:%02x", j>>8, j&0xff), bmcPass)
		}
		created := time.Since(t0)
		controllerConcurrency = 10
		defer func() { controllerConcurrency = 4 }()
		reqBefore := sim.TotalRequests()
		opsBefore := bmcRequestsByOperation(g)
		cpu0 := benchmeter.SelfCPU()
		t0 = time.Now()
		proc := startController(b, r, ns)
		list := &metal3v1.BareMetalHostList{}
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := env.List(ctx, list, client.InNamespace(ns)); err != nil {
				return false, err
			}
			done := 0
			for k := range list.Items {
				if list.Items[k].Status.Provisioning.State == metal3v1.StateAvailable && list.Items[k].Status.HardwareDetails != nil {
					done++
				}
			}
			return done == n, nil
		})
		g.Expect(err).NotTo(HaveOccurred())
		wall, cpu := time.Since(t0), benchmeter.SelfCPU()-cpu0
		req := sim.TotalRequests() - reqBefore
		ops := bmcRequestsByOperation(g)
		proc.Stop()
		service := serviceTimes(list.Items)

		b.ReportMetric(float64(n), "hosts")
		b.ReportMetric(wall.Seconds(), "s-to-available")
		b.ReportMetric(created.Seconds(), "s-writing-inventory")
		b.ReportMetric(baseWall.Seconds(), "s-baseline")
		b.ReportMetric(wall.Seconds()/baseWall.Seconds(), "x-baseline")
		b.ReportMetric(cpu.Seconds(), "cpu-s")
		b.ReportMetric(baseCPU.Seconds(), "cpu-s-baseline")
		b.ReportMetric(maxRSSMiB(), "maxrss-MiB")
		b.ReportMetric(float64(req)/float64(n), "redfish-req/host")
		b.ReportMetric(float64(baseReq)/float64(n), "redfish-req/host-baseline")
		b.ReportMetric(service.p50, "s-host-p50")
		b.ReportMetric(service.p99, "s-host-p99")
		b.ReportMetric(service.max, "s-host-max")
		b.Logf("%d hosts: available %s after the controller started (writing the inventory took %s), baseline %s; CPU %s vs %s; %.1f Redfish requests/host vs %.1f",
			n, wall.Round(time.Millisecond), created.Round(time.Millisecond), baseWall.Round(time.Millisecond), cpu.Round(time.Millisecond),
			baseCPU.Round(time.Millisecond), float64(req)/float64(n), float64(baseReq)/float64(n))
		b.Logf("controller's Redfish requests by operation, in all (per host): %s; the emulator served %d", perHost(ops, opsBefore, n), req)
		b.Logf("each host from registration started to inspection ended (status.operationHistory, whole seconds): p50 %.0fs, p99 %.0fs, max %.0fs", service.p50, service.p99, service.max)
	}
}

// hostServiceTimes summarises how long each host took from the start of its registration to the end of its
// inspection, as its status.operationHistory records them (metav1.Time: whole seconds). A host the controller
// starved (started, then left waiting behind the others) shows as a max far above p99.
type hostServiceTimes struct{ p50, p99, max float64 }

func serviceTimes(hosts []metal3v1.BareMetalHost) hostServiceTimes {
	if len(hosts) == 0 {
		return hostServiceTimes{}
	}
	d := make([]float64, 0, len(hosts))
	for i := range hosts {
		oh := hosts[i].Status.OperationHistory
		d = append(d, oh.Inspect.End.Sub(oh.Register.Start.Time).Seconds())
	}
	sort.Float64s(d)
	at := func(q float64) float64 { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return hostServiceTimes{p50: at(0.50), p99: at(0.99), max: d[len(d)-1]}
}

// bmcRequestsByOperation is the controller's yonder_bmc_requests_total summed over codes, by operation:
// where a host's requests go (the emulator counts only the total).
func bmcRequestsByOperation(g *WithT) map[string]float64 {
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "yonder_bmc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// perHost formats the growth of each operation's count from before to after, in all and per host.
func perHost(after, before map[string]float64, n int) string {
	ops := make([]string, 0, len(after))
	for op := range after {
		if after[op] > before[op] {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s %.0f (%.2f)", op, after[op]-before[op], (after[op]-before[op])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

func directInspect(ctx context.Context, address string) error {
	a, err := redfish.ParseAddress(address)
	if err != nil {
		return err
	}
	pin, err := redfish.ProbeCertificate(ctx, a, 0)
	if err != nil {
		return err
	}
	c, err := redfish.Dial(ctx, redfish.Config{Address: a, Username: bmcUser, Password: bmcPass, PinnedCertSHA256: pin})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.System(ctx); err != nil {
		return err
	}
	_, err = c.Inventory(ctx)
	return err
}

// inspectBaseline makes the Redfish calls of registration and inspection alone for n systems, on 10
// workers; it returns the wall time, the CPU time and the requests.
func inspectBaseline(g *WithT, sim *redfishsim.Server, n int) (time.Duration, time.Duration, int64) {
	ctx := context.Background()
	addrs := make(chan string, n)
	for j := 0; j < n; j++ {
		addrs <- sim.Address(fmt.Sprintf("s%04d", j))
	}
	close(addrs)
	reqBefore := sim.TotalRequests()
	cpu0, t0 := benchmeter.SelfCPU(), time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range addrs {
				errs <- directInspect(ctx, a)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	baseWall, baseCPU := time.Since(t0), benchmeter.SelfCPU()-cpu0
	baseReq := sim.TotalRequests() - reqBefore

	return baseWall, baseCPU, baseReq
}

// envInt is the positive integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
