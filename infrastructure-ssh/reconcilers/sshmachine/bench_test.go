package sshmachine_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/harness"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/yonder-dev/yonder/pkg/manager"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/test/benchsize"
	"github.com/yonder-dev/yonder/test/sshhosts"
	"github.com/yonder-dev/yonder/test/sshsim"
)

const benchData = "#cloud-config\nwrite_files:\n- path: /etc/kubernetes/bench.conf\n  content: bench\nruncmd:\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"

type usage struct {
	wall            time.Duration
	cpu, childCPU   time.Duration
	peakRSSKiB      int64
	requests, execs int64
	// byRequest counts the provider's API requests by verb and resource ("PATCH yondersshmachines/status").
	byRequest map[string]int64
	// timeline is when the Machines reached each step of their provisioning.
	timeline timeline
	// apiserver is what the management apiserver spent meanwhile, for every client (CAPI's controllers and
	// the provider): the shared resource that paces CAPI's Machine creation on a small machine.
	apiserver apiserverUsage
	// machineBusy is the fraction of the machine's cores that were busy (0–1).
	machineBusy float64
}

// apiserverUsage is the management apiserver's CPU time and the writes it served, by resource.
type apiserverUsage struct {
	cpu    time.Duration
	writes map[string]float64 // "PATCH machines/status" → count
}

func (a apiserverUsage) total() float64 {
	var n float64
	for _, v := range a.writes {
		n += v
	}
	return n
}

// apiserverMeter reads the management apiserver's CPU time (/proc) and its write counters (its own
// /metrics, apiserver_request_total), so the benchmark can say where the apiserver's time went.
type apiserverMeter struct {
	pid int
	rc  rest.Interface
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

var requestTotalRe = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)
var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

func (m apiserverMeter) read(g Gomega) apiserverUsage {
	cpu, err := benchmeter.ProcessCPU(m.pid)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := m.rc.Get().AbsPath("/metrics").DoRaw(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	u := apiserverUsage{cpu: cpu, writes: map[string]float64{}}
	for line := range strings.SplitSeq(string(b), "\n") {
		mm := requestTotalRe.FindStringSubmatch(line)
		if mm == nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range labelRe.FindAllStringSubmatch(mm[1], -1) {
			l[kv[1]] = kv[2]
		}
		if !writeVerbs[l["verb"]] {
			continue
		}
		v, err := strconv.ParseFloat(mm[2], 64)
		g.Expect(err).NotTo(HaveOccurred())
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		u.writes[key] += v
	}
	return u
}

// since is what the apiserver spent between earlier and a.
func (a apiserverUsage) since(earlier apiserverUsage) apiserverUsage {
	d := apiserverUsage{cpu: a.cpu - earlier.cpu, writes: map[string]float64{}}
	for k, v := range a.writes {
		if n := v - earlier.writes[k]; n > 0 {
			d.writes[k] = n
		}
	}
	return d
}

// timeline is when the Machines were created, started their bootstrap and finished it, in seconds from
// the scale-up, and each one's time from creation to provisioned: where a slow run spent its time (CAPI's
// MachineSet creating the Machines one by one, or the provider). The API's timestamps have a resolution of
// a second.
type timeline struct {
	created, started, finished, each []float64
}

// readTimeline reads the timeline from the YonderSSHMachines, relative to t0.
func readTimeline(ms []infrav1.YonderSSHMachine, t0 time.Time) timeline {
	var tl timeline
	for _, m := range ms {
		tl.created = append(tl.created, m.CreationTimestamp.Sub(t0).Seconds())
		if b := m.Status.Bootstrap; b != nil && b.StartedTime != nil && b.FinishedTime != nil {
			tl.started = append(tl.started, b.StartedTime.Sub(t0).Seconds())
			tl.finished = append(tl.finished, b.FinishedTime.Sub(t0).Seconds())
			tl.each = append(tl.each, b.FinishedTime.Sub(m.CreationTimestamp.Time).Seconds())
		}
	}
	return tl
}

// print writes each step's median and largest figure.
func (tl timeline) print() {
	fmt.Printf("provider timeline (s from the scale-up)      median          max\n")
	for _, st := range []struct {
		name string
		v    []float64
	}{{"YonderSSHMachine created", tl.created}, {"bootstrap started", tl.started}, {"bootstrap finished", tl.finished}, {"one Machine, created → provisioned", tl.each}} {
		fmt.Printf("  %-32s %12.0f %12.0f\n", st.name, benchmeter.Percentile(st.v, 50), benchmeter.Percentile(st.v, 100))
	}
}

// resetPeakRSS lets VmHWM measure one phase (Linux: writing 5 to clear_refs resets the peak).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0o600) }

func peakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func measure(f func()) usage {
	resetPeakRSS()
	c0, ch0, t0 := benchmeter.CPU(syscall.RUSAGE_SELF), benchmeter.CPU(syscall.RUSAGE_CHILDREN), time.Now()
	f()
	return usage{wall: time.Since(t0), cpu: benchmeter.CPU(syscall.RUSAGE_SELF) - c0, childCPU: benchmeter.CPU(syscall.RUSAGE_CHILDREN) - ch0, peakRSSKiB: peakRSSKiB()}
}

// benchPoll is the provider's --bootstrap-poll-interval in this benchmark; the baseline polls on the
// same schedule (sshmachine.PollDelay), so the ratio compares the same work.
const benchPoll = time.Second

// benchWorkers is the provider's default YonderSSHMachine concurrency (setup.Options, main.go); the
// baseline drives the hosts with as many workers.
const benchWorkers = 10

// BenchmarkProvisionMachinesOnSimulatedHosts: a MachineDeployment of 200 (YONDER_BENCH_MACHINES)
// YonderSSHMachines against 200 simulated SSH hosts (test/sshsim, real SSH protocol, scale only), with
// the real CAPI controllers, until every YonderSSHMachine is provisioned. Baseline, in the same run: the
// same bootstrap of 200 fresh simulated hosts driven directly, the way the controller drives them but
// without Kubernetes: the same SSH client and run protocol, a delaying work queue with as many workers as
// the controller's default concurrency, no worker held while a run is waited for, and the run status
// polled on the provider's schedule (same poll interval). Printed: time, CPU seconds of this process
// (management controllers + simulator; the envtest apiserver is a separate process) and of the
// simulated hosts' shells, peak RSS, API requests of the provider per Machine (and by verb and
// resource), SSH execs per Machine.
func BenchmarkProvisionMachinesOnSimulatedHosts(b *testing.B) {
	count := benchsize.Pick(200, 4) // tiny in the test suite
	if v, err := strconv.Atoi(os.Getenv("YONDER_BENCH_MACHINES")); err == nil && v > 0 {
		count = v
	}
	for i := 0; i < b.N; i++ {
		base, prov := benchOnce(b, count)
		b.ReportMetric(prov.wall.Seconds(), "s-to-provisioned")
		b.ReportMetric(base.wall.Seconds(), "baseline-s-to-provisioned")
		b.ReportMetric(prov.wall.Seconds()/base.wall.Seconds(), "x-baseline")
		b.ReportMetric(float64(prov.requests)/float64(count), "apireq/machine")
		b.ReportMetric(float64(prov.peakRSSKiB)/1024, "peak-RSS-MiB")
		// The MachineSet creates the Machines one by one; the provider's own share is how long one Machine
		// takes once it exists.
		b.ReportMetric(benchmeter.Percentile(prov.timeline.created, 100), "s-last-machine-created")
		b.ReportMetric(benchmeter.Percentile(prov.timeline.each, 50), "p50-s-machine-created-to-provisioned")
		// What paces that creation: the apiserver's cores and every client's writes per Machine.
		b.ReportMetric(prov.apiserver.cpu.Seconds()/prov.wall.Seconds(), "apiserver-cores")
		b.ReportMetric(prov.apiserver.total()/float64(count), "apiserver-writes/machine")
		b.ReportMetric(100*prov.machineBusy, "machine-busy-%")
		fmt.Printf("\nSSH provider, %d Machines on %d simulated hosts (run %d of %d), poll interval %s, %d workers\n", count, count, i+1, b.N, benchPoll, benchWorkers)
		fmt.Printf("%-34s %12s %12s %12s\n", "", "baseline", "provider", "ratio")
		fmt.Printf("%-34s %12.2f %12.2f %11.2fx\n", "time to all provisioned (s)", base.wall.Seconds(), prov.wall.Seconds(), prov.wall.Seconds()/base.wall.Seconds())
		fmt.Printf("%-34s %12.2f %12.2f %11.2fx\n", "CPU of this process (s)", base.cpu.Seconds(), prov.cpu.Seconds(), prov.cpu.Seconds()/base.cpu.Seconds())
		fmt.Printf("%-34s %12.2f %12.2f %11.2fx\n", "CPU of simulated host shells (s)", base.childCPU.Seconds(), prov.childCPU.Seconds(), prov.childCPU.Seconds()/max(base.childCPU.Seconds(), 0.001))
		fmt.Printf("%-34s %12d %12d %11.2fx\n", "peak RSS of this process (MiB)", base.peakRSSKiB/1024, prov.peakRSSKiB/1024, float64(prov.peakRSSKiB)/float64(base.peakRSSKiB))
		fmt.Printf("%-34s %12s %12.1f\n", "provider API requests per Machine", "-", float64(prov.requests)/float64(count))
		for _, k := range slices.Sorted(maps.Keys(prov.byRequest)) {
			fmt.Printf("  %-32s %12s %12.2f\n", k, "", float64(prov.byRequest[k])/float64(count))
		}
		prov.timeline.print()
		fmt.Printf("management apiserver, all clients: %.2f cores (CPU %.1f s), %.1f writes per Machine; the machine's cores %.0f%% busy\n",
			prov.apiserver.cpu.Seconds()/prov.wall.Seconds(), prov.apiserver.cpu.Seconds(), prov.apiserver.total()/float64(count), 100*prov.machineBusy)
		for _, k := range slices.Sorted(maps.Keys(prov.apiserver.writes)) {
			if n := prov.apiserver.writes[k] / float64(count); n >= 0.05 {
				fmt.Printf("  %-32s %12s %12.2f\n", k, "", n)
			}
		}
		fmt.Printf("%-34s %12.1f %12.1f %11.2fx\n", "SSH execs per Machine", float64(base.execs)/float64(count), float64(prov.execs)/float64(count), float64(prov.execs)/float64(base.execs))
	}
}

func benchOnce(b *testing.B, count int) (usage, usage) {
	b.Helper()
	g := NewWithT(b)
	keyPEM, signer, err := sshhosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	return benchBaseline(b, g, count, signer), benchProvider(b, g, count, keyPEM, signer)
}

// benchRun is one host's bootstrap in the baseline: started, or not yet.
type benchRun struct {
	host    *sshsim.Host
	started time.Time
}

// benchBaseline bootstraps count fresh simulated hosts directly: benchWorkers workers take hosts from a
// delaying queue, start each run, and put it back to be polled after sshmachine.PollDelay, as the
// controller requeues a machine.
func benchBaseline(b *testing.B, g *WithT, count int, signer ssh.Signer) usage {
	b.Helper()
	ctx := context.Background()
	simB, err := sshsim.Start(count, signer.PublicKey(), b.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = simB.Close() }()
	cfg, err := cloudinit.Parse([]byte(benchData), cloudinit.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	script := cfg.Script()
	base := measure(func() {
		q := workqueue.NewTypedDelayingQueue[*benchRun]()
		var wg, left sync.WaitGroup
		left.Add(len(simB.Hosts))
		for w := 0; w < benchWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, shutdown := q.Get()
					if shutdown {
						return
					}
					done, err := benchStep(ctx, r, signer, script)
					g.Expect(err).NotTo(HaveOccurred())
					if done {
						left.Done()
					} else {
						q.AddAfter(r, sshmachine.PollDelay(benchPoll, time.Since(r.started)))
					}
					q.Done(r)
				}
			}()
		}
		for _, h := range simB.Hosts {
			q.Add(&benchRun{host: h})
		}
		left.Wait()
		q.ShutDown()
		wg.Wait()
	})
	base.execs = simB.Execs
	return base
}

// benchProvider provisions a MachineDeployment of count on count fresh simulated hosts with the provider
// and the real CAPI controllers.
func benchProvider(b *testing.B, g *WithT, count int, keyPEM []byte, signer ssh.Signer) usage {
	b.Helper()
	ctx := context.Background()
	simP, err := sshsim.Start(count, signer.PublicKey(), b.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = simP.Close() }()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	g.Expect(env.Create(ctx, nsObj)).To(Succeed())
	ns := nsObj.Name
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}})).To(Succeed())
	for _, h := range simP.Hosts {
		g.Expect(env.Create(ctx, &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: h.Name, Labels: map[string]string{"pool": "bench"}},
			Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: h.Address, Port: int32(h.Port), User: "root",
				CredentialsSecretRef: infrav1.SecretReference{Name: "key"}, HostKey: sshexec.FormatHostKey(h.HostKey)}}})).To(Succeed())
	}
	rc, requests := harness.CountRequests(env.Config)
	byRequest := &requestKinds{n: map[string]int64{}}
	count0 := rc.WrapTransport
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return byRequest.wrap(count0(rt)) }
	rc.QPS, rc.Burst = 200, 400
	o := setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, PollInterval: benchPoll, RetryInterval: time.Second}
	p := harness.StartProvider(b, rc, env.GetScheme(), setup.Reconcilers(o))
	defer p.Stop()
	cluster := newCluster(b, g, ns, "bench")
	data := dataSecret(g, ns, "bench", cluster.Name, benchData)
	// Let the provider settle on the inventory (first probes) before timing Machines.
	g.Eventually(func(g Gomega) {
		for _, h := range hostList(g, ns) {
			g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseAvailable))
		}
	}, 5*time.Minute).Should(Succeed())
	md := newMachineDeployment(g, ns, "bench", cluster, data.Name, "bench")
	pid, err := env.APIServerPID()
	g.Expect(err).NotTo(HaveOccurred())
	meter := apiserverMeter{pid: pid, rc: kubernetes.NewForConfigOrDie(env.Config).CoreV1().RESTClient()}
	requests.Store(0)
	byRequest.reset()
	execs0 := simP.Execs
	api0 := meter.read(g)
	cpu0, err := benchmeter.ReadMachineCPU()
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	prov := measure(func() {
		harness.Scale(g, env, md, int32(count))
		g.Eventually(func(g Gomega) int {
			n := 0
			for _, m := range sshMachines(g, ns) {
				if ptr.Deref(m.Status.Initialization.Provisioned, false) {
					n++
				}
			}
			return n
		}, 15*time.Minute, time.Second).Should(Equal(count))
	})
	prov.apiserver = meter.read(g).since(api0)
	cpu1, err := benchmeter.ReadMachineCPU()
	g.Expect(err).NotTo(HaveOccurred())
	prov.machineBusy = cpu1.BusySince(cpu0)
	prov.requests = requests.Load()
	prov.timeline = readTimeline(sshMachines(g, ns), t0)
	prov.byRequest = byRequest.snapshot()
	prov.execs = simP.Execs - execs0
	g.Expect(checkClaims(g, ns)).To(HaveLen(count))
	// Leave nothing behind for the next iteration.
	g.Expect(env.Delete(ctx, md)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(sshMachines(g, ns)).To(BeEmpty()) }, 15*time.Minute, time.Second).Should(Succeed())
	return prov
}

// requestKinds counts requests by verb and resource, watches apart.
type requestKinds struct {
	mu sync.Mutex
	n  map[string]int64
}

func (k *requestKinds) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		key := requestKind(r)
		k.mu.Lock()
		k.n[key]++
		k.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// requestKind names a request by method and resource: /apis/g/v/namespaces/ns/res/name/sub → "PATCH res/sub"
// (a GET without a name is a LIST, one with watch=true a WATCH).
func requestKind(r *http.Request) string {
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i := slices.Index(p, "namespaces")
	if i < 0 || i+2 >= len(p) {
		return r.Method + " " + r.URL.Path
	}
	res, verb := p[i+2], r.Method
	switch {
	case r.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case verb == http.MethodGet && i+3 >= len(p):
		verb = "LIST"
	}
	if i+4 < len(p) {
		res += "/" + p[i+4]
	}
	return verb + " " + res
}

func (k *requestKinds) reset() { k.mu.Lock(); clear(k.n); k.mu.Unlock() }

func (k *requestKinds) snapshot() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.n)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// benchStep is one pass of the controller over a host, without Kubernetes: connect, then start the run
// (first pass) or read its state; done once it finished with its sentinel.
func benchStep(ctx context.Context, r *benchRun, signer ssh.Signer, script string) (bool, error) {
	h := r.host
	e, err := sshexec.SSHDialer{}.Dial(ctx, sshexec.Target{Endpoint: sshexec.Endpoint{Address: h.Address, Port: h.Port, User: "root", Signer: signer, HostKey: h.HostKey}})
	if err != nil {
		return false, err
	}
	defer func() { _ = e.Close() }()
	if r.started.IsZero() {
		r.started = time.Now()
		_, err := remote.Start(ctx, e, "bench", script)
		return false, err
	}
	st, err := remote.State(ctx, e, "bench")
	if err != nil || !st.Finished {
		return false, err
	}
	if st.ExitCode != 0 || !st.Sentinel {
		return false, fmt.Errorf("bootstrap on %s failed: %+v", h.Name, st)
	}
	return true, remote.Finish(ctx, e, "bench")
}
