package netboot_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// BenchmarkDHCPDiscoverOffer measures DISCOVER→OFFER over real UDP sockets on loopback with 10,000 known
// hosts: the load generator acts as a relay agent (giaddr), so offers come back by unicast. Each
// iteration sends one DISCOVER per host with up to 64 in flight and reports offers/s and p50/p99 latency.
func BenchmarkDHCPDiscoverOffer(b *testing.B) {
	hosts, inFlight := benchsize.Pick(10000, 200), 64 // tiny in the test suite
	inv := inventory.NewStatic()
	macs := make([]net.HardwareAddr, hosts)
	for i := range macs {
		macs[i] = net.HardwareAddr{0x52, 0x54, 0x01, byte(i >> 16), byte(i >> 8), byte(i)}
		inv.Set(inventory.Host{Name: fmt.Sprintf("metal/h%d", i), MAC: macs[i],
			Address: netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})})
	}
	relay, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = relay.Close() }()
	port := relay.LocalAddr().(*net.UDPAddr).Port
	srvIP := netip.MustParseAddr("127.0.0.2")
	serveDHCP(b, inv, srvIP, port)

	packets := make([][]byte, hosts)
	for i, mac := range macs {
		d, _ := dhcpv4.NewDiscovery(mac, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
			dhcpv4.WithGatewayIP(net.IPv4(127, 0, 0, 3)), dhcpv4.WithTransactionID(dhcpv4.TransactionID{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}))
		packets[i] = d.ToBytes()
	}
	to := &net.UDPAddr{IP: srvIP.AsSlice(), Port: port}
	var all []time.Duration
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		lat, took := discoverAll(b, relay, to, packets, inFlight)
		elapsed += took
		all = append(all, lat...)
	}
	b.StopTimer()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "offers/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// serveDHCP runs the DHCP server for inv on srvIP:port (answering relays on port) until the benchmark
// ends.
func serveDHCP(b *testing.B, inv inventory.Lookup, srvIP netip.Addr, port int) {
	b.Helper()
	b.Cleanup(startDHCP(b, dhcp.Config{ServerIP: srvIP, HTTPBase: "http://127.0.0.2:8080",
		ListenAddr: netip.AddrPortFrom(srvIP, uint16(port)), RelayPort: port}, inv))
}

// startDHCP starts the DHCP server cfg describes for inv and returns what stops it.
func startDHCP(b *testing.B, cfg dhcp.Config, inv inventory.Lookup) (stop func()) {
	b.Helper()
	srv, err := dhcp.NewServer(cfg, inv, logr.Discard(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ls, err := srv.Listen()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ls) }()
	return func() { cancel(); <-done }
}

// discoverAll sends one DISCOVER per packet through relay to the server with up to inFlight outstanding
// and returns each offer's latency and the time it all took.
func discoverAll(b *testing.B, relay *net.UDPConn, to *net.UDPAddr, packets [][]byte, inFlight int) ([]time.Duration, time.Duration) {
	b.Helper()
	hosts := len(packets)
	sent := make([]time.Time, hosts)
	lat := make([]time.Duration, 0, hosts)
	slots := make(chan struct{}, inFlight)
	recvDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 1500)
		for len(lat) < hosts {
			_ = relay.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _, err := relay.ReadFromUDP(buf)
			if err != nil {
				recvDone <- fmt.Errorf("after %d offers: %w", len(lat), err)
				return
			}
			i := int(buf[4])<<24 | int(buf[5])<<16 | int(buf[6])<<8 | int(buf[7]) // xid
			if n > 240 && i < hosts {
				lat = append(lat, time.Since(sent[i]))
				<-slots
			}
		}
		recvDone <- nil
	}()
	start := time.Now()
	for i := range hosts {
		slots <- struct{}{}
		sent[i] = time.Now()
		if _, err := relay.WriteToUDP(packets[i], to); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-recvDone; err != nil {
		b.Fatalf("lost offers (%d in flight): %v", inFlight, err)
	}
	return lat, time.Since(start)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// bootHTTPServer serves dir's artifacts with our boot server on loopback, as yonder-metal-manager serves
// /artifacts/, until the benchmark ends; it returns its address.
func bootHTTPServer(b *testing.B, dir string) string {
	b.Helper()
	bs, err := bootserver.New(bootserver.Config{BaseURL: "http://127.0.0.1", ArtifactsDir: dir, Lookup: inventory.NewStatic()}, logr.Discard(), nil)
	if err != nil {
		b.Fatal(err)
	}
	hln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hsrv := &http.Server{Handler: bs.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hsrv.Serve(hln) }()
	b.Cleanup(func() { _ = hsrv.Close(); _ = bs.Close() })
	return hln.Addr().String()
}
