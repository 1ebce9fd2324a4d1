package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// Environment of the probe client process BenchmarkProbeResponder starts (TestMain runs it instead of the
// tests when probeClientTarget is set).
const (
	probeClientTarget  = "YONDER_PROBE_CLIENT_TARGET"
	probeClientProbes  = "YONDER_PROBE_CLIENT_PROBES"
	probeClientSockets = "YONDER_PROBE_CLIENT_SOCKETS"
)

func TestMain(m *testing.M) {
	if target := os.Getenv(probeClientTarget); target != "" {
		if err := runProbeClient(target); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runProbeClient plays many nodes probing one gateway: each socket (a node) sends a probe, waits for the
// answer (resending after a second without one) and sends the next, until the sockets together got the
// number of answers asked for.
func runProbeClient(target string) error {
	addr, err := netip.ParseAddrPort(target)
	if err != nil {
		return err
	}
	probes, err1 := strconv.Atoi(os.Getenv(probeClientProbes))
	sockets, err2 := strconv.Atoi(os.Getenv(probeClientSockets))
	if err := errors.Join(err1, err2); err != nil || probes < 1 || sockets < 1 {
		return fmt.Errorf("%s and %s must be positive numbers: %w", probeClientProbes, probeClientSockets, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sockets)
	for i := range sockets {
		n := probes / sockets
		if i < probes%sockets {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- probeLoop(addr, n)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// probeLoop gets n answers from addr on one socket, one probe outstanding at a time.
func probeLoop(addr netip.AddrPort, n int) error {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	buf := make([]byte, 64)
	for seq := uint32(0); int(seq) < n; {
		if _, err := c.WriteToUDPAddrPort(header(typeRequest, seq, time.Now(), 0), addr); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		m, _, err := c.ReadFromUDPAddrPort(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue // lost: probe again
		}
		if err != nil {
			return err
		}
		if m >= headerLen && buf[4] == typeReply {
			seq++
		}
	}
	return nil
}

// BenchmarkProbeResponder measures what answering gateway probes costs the daemon: every node probes each
// gateway in its groups 4 times per interval (20 probes a second at the default 200 ms), so a gateway that
// 5,000 nodes probe answers 100,000 probes a second. The responder is a real Prober in this process; the
// nodes are another process (this test binary in client mode: 256 sockets, one probe outstanding each), so
// the CPU measured here is the responder's alone (and Go's runtime). Reported: CPU µs per probe answered,
// the responder's throughput at this concurrency, and the cores a gateway would spend at 1,000 and 5,000
// probing nodes (a planning figure: issue 21 sets no goal for it).
func BenchmarkProbeResponder(b *testing.B) {
	probes := benchsize.Pick(400_000, 5_000)
	const sockets = 256
	responder, err := Listen(0, 200*time.Millisecond, 3, func(string, bool) {})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go responder.Run(ctx)
	port, err := strconv.Atoi(portOf(responder))
	if err != nil {
		b.Fatal(err)
	}
	target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))

	var cpuPerProbe, perSecond float64
	b.ResetTimer()
	for range b.N {
		client := exec.Command(os.Args[0], "-test.run=^$") // this test binary, in client mode (TestMain)
		client.Env = append(os.Environ(), probeClientTarget+"="+target.String(),
			probeClientProbes+"="+strconv.Itoa(probes), probeClientSockets+"="+strconv.Itoa(sockets))
		cpu0, t0 := benchmeter.SelfCPU(), time.Now()
		out, err := client.CombinedOutput()
		if err != nil {
			b.Fatalf("probe client: %v\n%s", err, out)
		}
		elapsed, cpu := time.Since(t0), benchmeter.SelfCPU()-cpu0
		cpuPerProbe += float64(cpu.Microseconds()) / float64(probes)
		perSecond += float64(probes) / elapsed.Seconds()
	}
	b.StopTimer()
	cpuPerProbe /= float64(b.N)
	perSecond /= float64(b.N)
	b.ReportMetric(cpuPerProbe, "cpu-us/probe")
	b.ReportMetric(perSecond, "probes/s")
	b.ReportMetric(cpuPerProbe*20*1000/1e6, "cores-at-1000-nodes")
	b.ReportMetric(cpuPerProbe*20*5000/1e6, "cores-at-5000-nodes")
	fmt.Printf("probe responder: %d probes from %d sockets: %.2f CPU µs per probe answered, %.0f probes/s; a gateway probed by 1,000 nodes (20,000 probes/s) spends %.2f cores, by 5,000 nodes %.2f\n",
		probes, sockets, cpuPerProbe, perSecond, cpuPerProbe*20*1000/1e6, cpuPerProbe*20*5000/1e6)
}

// BenchmarkProberReplies measures what taking in one probe reply costs a prober that watches many targets: a
// gateway watches the gateways of every other site (200 sites of 3 gateways: 600 fast targets, each probed 20
// times a second at the default 200 ms, so 12,000 replies a second). The baseline in the same run is a
// prober watching one target; a reply should cost the same whatever the count (the ratio ≈ 1: targets are
// indexed by address). The replies are handed to the prober directly, without sockets, so only the
// bookkeeping is measured.
func BenchmarkProberReplies(b *testing.B) {
	targets := benchsize.Pick(600, 20)
	replies := benchsize.Pick(3_000_000, 30_000)
	perReply := func(n int) time.Duration {
		p, err := Listen(0, 200*time.Millisecond, 3, func(string, bool) {})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.conn.Close(); _ = p.side.Close() }()
		ts := make([]Target, n)
		for i := range ts {
			ts[i] = Target{Key: fmt.Sprintf("gw-%d/vxlan", i), Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 9), Fast: true}
		}
		p.SetTargets(ts)
		now := time.Now()
		reply := header(typeReply, 1, now, 0)
		t0 := time.Now()
		for i := range replies {
			p.onReply(reply, ts[i%n].Addr, now)
		}
		return time.Since(t0) / time.Duration(replies)
	}
	var one, many time.Duration
	b.ResetTimer()
	for range b.N {
		one += perReply(1)
		many += perReply(targets)
	}
	b.StopTimer()
	one /= time.Duration(b.N)
	many /= time.Duration(b.N)
	ratio := float64(many) / float64(one)
	b.ReportMetric(float64(many.Nanoseconds()), "ns/reply")
	b.ReportMetric(float64(one.Nanoseconds()), "baseline-ns/reply")
	b.ReportMetric(ratio, "x-baseline")
	fmt.Printf("prober replies: %d targets %v per reply, 1 target %v per reply (%.2fx); at 20 replies/s per target, %d targets cost %.4f cores\n",
		targets, many, one, ratio, targets, float64(many.Nanoseconds())*20*float64(targets)/1e9)
}
