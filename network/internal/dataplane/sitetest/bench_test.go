package sitetest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
)

type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		CPU struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
}

// iperf runs one single-stream TCP iperf3 test from client namespace to server namespace's address.
// It returns Gbit/s and the CPU percent (sender + receiver) per Gbit/s.
func iperf(b *testing.B, lab *topo.Lab, client, server, addr string, port int) (float64, float64) {
	b.Helper()
	srv := topo.In(server, "iperf3", "-s", "-1", "-p", strconv.Itoa(port))
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }() // the latest server
	var r iperfResult
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := lab.Exec(client, "iperf3", "-c", addr, "-p", strconv.Itoa(port), "-t", benchsize.Pick("2", "1"), "-J")
		r = iperfResult{}
		if jerr := json.Unmarshal([]byte(out), &r); jerr != nil && err == nil {
			err = fmt.Errorf("failed to parse iperf3 output: %w", jerr)
		}
		if err == nil && r.Error == "" && r.End.SumReceived.BitsPerSecond > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("iperf3 %s → %s failed: %v %s", client, addr, err, r.Error)
		}
		// The server may not listen yet (or the one-off server went away): try again.
		time.Sleep(50 * time.Millisecond)
		if srv.ProcessState != nil || err != nil || r.Error != "" {
			_ = srv.Process.Kill()
			_ = srv.Wait()
			srv = topo.In(server, "iperf3", "-s", "-1", "-p", strconv.Itoa(port))
			if err := srv.Start(); err != nil {
				b.Fatal(err)
			}
		}
	}
	gbps := r.End.SumReceived.BitsPerSecond / 1e9
	return gbps, (r.End.CPU.HostTotal + r.End.CPU.RemoteTotal) / gbps
}

// vethBaseline is a plain veth pair between two namespaces, 10.99.0.1 ↔ 10.99.0.2: the benchmarks' baseline.
func vethBaseline(lab *topo.Lab) (string, string) {
	v1, v2 := lab.AddNS("v1"), lab.AddNS("v2")
	lab.MustIP(v1, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", v2)
	lab.MustIP(v1, "addr", "add", "10.99.0.1/24", "dev", "eth0")
	lab.MustIP(v2, "addr", "add", "10.99.0.2/24", "dev", "eth0")
	lab.MustIP(v1, "link", "set", "eth0", "up")
	lab.MustIP(v2, "link", "set", "eth0", "up")
	return v1, v2
}

// waitPaths waits until each pair's first pod pings the second's, failing the benchmark at deadline.
func waitPaths(b *testing.B, lab *topo.Lab, deadline time.Time, pairs [][2]*Node) {
	b.Helper()
	for _, p := range pairs {
		for {
			if _, err := lab.Exec(p[0].Pod, "ping", "-c", "1", "-W", "1", p[1].PodIP.String()); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("no path %s → %s", p[0].Name, p[1].Name)
			}
		}
	}
}

// gatewayLoad is what a measured run cost beyond iperf3's own CPU: the gateway daemons' CPU (embedded
// wireguard-go encrypts and decrypts in them) and how busy the machine's cores were, so a slow path says
// whether it ran out of cores or not.
type gatewayLoad struct{ cores, busy float64 }

// underLoad runs f and measures the daemons of nodes and the machine meanwhile.
func underLoad(b *testing.B, nodes []*Node, f func()) gatewayLoad {
	b.Helper()
	daemonsCPU := func() time.Duration {
		var sum time.Duration
		for _, n := range nodes {
			c, err := benchmeter.ProcessCPU(n.cmd.Process.Pid)
			if err != nil {
				b.Fatalf("CPU of %s's daemon: %v", n.Name, err)
			}
			sum += c
		}
		return sum
	}
	m0, err := benchmeter.ReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	c0, t0 := daemonsCPU(), time.Now()
	f()
	c1, wall := daemonsCPU(), time.Since(t0)
	m1, err := benchmeter.ReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return gatewayLoad{cores: (c1 - c0).Seconds() / wall.Seconds(), busy: m1.BusySince(m0)}
}

// benchWireGuardL3Path switches s to --wireguard-l3 and measures the gateway pod → gateway pod path b.N
// times: Gbit/s, CPU%/Gbit and ping RTT, summed.
func benchWireGuardL3Path(b *testing.B, s *Sites) (gbps, cpu, rttSum float64, load gatewayLoad) {
	b.Helper()
	b.StopTimer()
	useWireGuardL3(s)
	ga1, gb1 := s.Nodes["ga1"], s.Nodes["gb1"]
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := s.Lab.Exec(ga1.Pod, "ping", "-c", "1", "-W", "1", gb1.PodIP.String()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no L3 path %s → %s", ga1.Name, gb1.Name)
		}
	}
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		var g, c float64
		l := underLoad(b, []*Node{ga1, gb1}, func() { g, c = iperf(b, s.Lab, ga1.Pod, gb1.Pod, gb1.PodIP.String(), 5201) })
		gbps, cpu = gbps+g, cpu+c
		load.cores, load.busy = load.cores+l.cores, load.busy+l.busy
		rttSum += rtt(b, s.Lab, ga1.Pod, gb1.PodIP.String())
	}
	return gbps, cpu, rttSum, load
}

var rttRe = regexp.MustCompile(`= [0-9.]+/([0-9.]+)/`)

// rtt is the average ping round trip in microseconds.
func rtt(b *testing.B, lab *topo.Lab, client, addr string) float64 {
	b.Helper()
	out, err := lab.Exec(client, "ping", "-q", "-c", "50", "-i", "0.01", addr)
	if err != nil {
		b.Fatal(err)
	}
	m := rttRe.FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("failed to parse ping output: %s", out)
	}
	ms, _ := strconv.ParseFloat(m[1], 64)
	return ms * 1000
}

// BenchmarkDataplaneThroughput measures single-stream iperf3 throughput and ping latency over plain veth
// (baseline), over the VXLAN path (pod → node → eBPF → VXLAN → node → pod, inside a Site) and over the
// WireGuard path (pod → gateway → VXLAN inside WireGuard → gateway → pod, between Sites), and the kernel's own
// path for the VXLAN case (same devices and static routes, no eBPF program), in the same run.
func BenchmarkDataplaneThroughput(b *testing.B) {
	s := NewSites(b, netv1.ProtocolWireGuard)
	lab := s.Lab
	v1, v2 := vethBaseline(lab)
	a1, ga1, gb1 := s.Nodes["a1"], s.Nodes["ga1"], s.Nodes["gb1"]
	waitPaths(b, lab, time.Now().Add(20*time.Second), [][2]*Node{{a1, ga1}, {ga1, gb1}})
	var veth, vx, wg, kern, vethCPU, vxCPU, wgCPU, kernCPU, vethRTT, vxRTT, wgRTT, kernRTT float64
	var wgL3, wgL3CPU float64
	var wgGateways, wgBusy float64 // gateway daemons' cores, machine busy fraction: summed over runs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, c := iperf(b, lab, v1, v2, "10.99.0.2", 5201)
		veth, vethCPU = veth+g, vethCPU+c
		g, c = iperf(b, lab, a1.Pod, ga1.Pod, ga1.PodIP.String(), 5201)
		vx, vxCPU = vx+g, vxCPU+c
		wgLoad := underLoad(b, []*Node{ga1, gb1}, func() { g, c = iperf(b, lab, ga1.Pod, gb1.Pod, gb1.PodIP.String(), 5201) })
		wg, wgCPU = wg+g, wgCPU+c
		wgGateways, wgBusy = wgGateways+wgLoad.cores, wgBusy+wgLoad.busy
		// The same WireGuard devices carrying TCP directly (L3, no VXLAN inside): gateway node to gateway
		// node over their addresses inside WireGuard. What the WireGuard path could reach without the inner
		// VXLAN (the kernel hands the TUN TSO super-packets instead of segmented VXLAN datagrams).
		g, c = iperf(b, lab, ga1.NS, gb1.NS, "10.20.1.0", 5202)
		wgL3, wgL3CPU = wgL3+g, wgL3CPU+c
		vethRTT += rtt(b, lab, v1, "10.99.0.2")
		vxRTT += rtt(b, lab, a1.Pod, ga1.PodIP.String())
		wgRTT += rtt(b, lab, ga1.Pod, gb1.PodIP.String())
		// The kernel's own path for the same encapsulation: the daemons of a1 and ga1 stop (their eBPF
		// programs detach with them), the VXLAN devices, FDB, neighbours and static routes stay.
		s.Stop(a1)
		s.Stop(ga1)
		g, c = iperf(b, lab, a1.Pod, ga1.Pod, ga1.PodIP.String(), 5201)
		kern, kernCPU = kern+g, kernCPU+c
		kernRTT += rtt(b, lab, a1.Pod, ga1.PodIP.String())
		s.Start(a1)
		s.Start(ga1)
		for _, n := range []*Node{a1, ga1} {
			for {
				if st, err := s.Debug(n); err == nil && st.Attachment != "" {
					break
				}
			}
		}
	}
	// The same pod path with --wireguard-l3 (one active gateway per Site): TCP straight into WireGuard.
	l3, l3CPU, l3RTT, l3Load := benchWireGuardL3Path(b, s)
	n := float64(b.N)
	// Where WireGuard's CPU goes: the gateway daemons (embedded wireguard-go), per Gbit/s, and whether the
	// machine had cores left (iperf3's cpu%/Gbit above counts only the iperf3 processes).
	b.ReportMetric(100*l3Load.cores/l3, "wireguard-l3-path-gateways-cpu%/Gbit")
	b.ReportMetric(100*l3Load.busy/n, "wireguard-l3-path-machine-busy-%")
	b.ReportMetric(100*wgGateways/wg, "wireguard-gateways-cpu%/Gbit")
	b.ReportMetric(100*wgBusy/n, "wireguard-machine-busy-%")
	b.ReportMetric(l3/n, "wireguard-l3-path-Gbit/s")
	b.ReportMetric(l3/veth, "wireguard-l3-path-x-veth")
	b.ReportMetric((l3RTT-vethRTT)/n, "wireguard-l3-path-added-µs")
	b.ReportMetric(l3CPU/n, "wireguard-l3-path-cpu%/Gbit")
	b.ReportMetric(veth/n, "veth-Gbit/s")
	b.ReportMetric(vx/n, "vxlan-Gbit/s")
	b.ReportMetric(wg/n, "wireguard-Gbit/s")
	b.ReportMetric(vx/veth, "vxlan-x-veth")
	b.ReportMetric(kern/n, "kernel-vxlan-Gbit/s")
	b.ReportMetric(vx/kern, "vxlan-x-kernel-vxlan")
	b.ReportMetric((kernRTT-vethRTT)/n, "kernel-vxlan-added-µs")
	b.ReportMetric(kernCPU/n, "kernel-vxlan-cpu%/Gbit")
	b.ReportMetric(wg/veth, "wireguard-x-veth")
	b.ReportMetric((vxRTT-vethRTT)/n, "vxlan-added-µs")
	b.ReportMetric((wgRTT-vethRTT)/n, "wireguard-added-µs")
	b.ReportMetric(vethCPU/n, "veth-cpu%/Gbit")
	b.ReportMetric(vxCPU/n, "vxlan-cpu%/Gbit")
	b.ReportMetric(wgCPU/n, "wireguard-cpu%/Gbit")
	b.ReportMetric(wgL3/n, "wireguard-l3-Gbit/s")
	b.ReportMetric(wgL3/veth, "wireguard-l3-x-veth")
	b.ReportMetric(wgL3CPU/n, "wireguard-l3-cpu%/Gbit")
	st, _ := s.Debug(ga1)
	b.Logf("wireguard device on ga1: %s", st.WireGuard.Kind)
}
