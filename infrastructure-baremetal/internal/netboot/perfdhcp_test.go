package netboot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/pkg/deathsig"
	"github.com/yonder-dev/yonder/test/benchsize"
	"github.com/yonder-dev/yonder/test/labnet"
)

// perfdhcpResult is what perfdhcp reports for DISCOVER-OFFER.
type perfdhcpResult struct {
	rate, avgDelayMs, dropsPct float64
}

var (
	perfRate  = regexp.MustCompile(`Rate: ([0-9.]+) DISCOVER-OFFER/second`)
	perfDelay = regexp.MustCompile(`avg delay: ([0-9.]+) ms`)
	perfDrops = regexp.MustCompile(`drops ratio: ([0-9.]+) %`)
)

// runPerfdhcp runs perfdhcp as a relay agent at local (port 67) in the network namespace netns.
func runPerfdhcp(b *testing.B, netns, local, server, macs string, rate int) perfdhcpResult {
	b.Helper()
	out, err := exec.Command("nsenter", "--net="+netns, "perfdhcp", "-4", "-i", "-l", local, "-L", "67", "-M", macs, "-R", strconv.Itoa(perfdhcpReservations()),
		"-r", strconv.Itoa(rate), "-p", benchsize.Pick("5", "1"), server).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Rate:") {
		b.Fatalf("perfdhcp failed: %v\n%s", err, out)
	}
	var r perfdhcpResult
	for re, v := range map[*regexp.Regexp]*float64{perfRate: &r.rate, perfDelay: &r.avgDelayMs, perfDrops: &r.dropsPct} {
		if m := re.FindStringSubmatch(string(out)); m != nil {
			*v, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	return r
}

// BenchmarkDHCPPerfdhcpVersusKea drives our server and ISC Kea (kea-dhcp4-server) with ISC perfdhcp
// (kea-admin), both configured with the same 10,000 host reservations, on one lab bridge, perfdhcp acting
// as a relay agent. It reports each server's DISCOVER→OFFER rate at an offered 20,000/s, perfdhcp's average
// delay and drop ratio, and our rate as a ratio of Kea's. perfdhcp and Kea run in network namespaces of
// their own on the bridge: their port-67 sockets do not take SO_REUSEADDR, and a DHCP server of another
// suite bound to 0.0.0.0:67 in this namespace (the bare-metal e2e's, running beside the benchmarks in
// make test) made perfdhcp's bind fail in a CI run.
func BenchmarkDHCPPerfdhcpVersusKea(b *testing.B) {
	for _, tool := range []string{"perfdhcp", "kea-dhcp4"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s is missing: install kea-admin and kea-dhcp4-server (hack/test-bins.sh --packages)", tool)
		}
	}
	n := labnet.NewForTest(b)
	ctx := context.Background()
	keaNS, err := n.Attach(ctx, "kea")
	if err != nil {
		b.Fatal(err)
	}
	relayNS, err := n.Attach(ctx, "relay")
	if err != nil {
		b.Fatal(err)
	}
	keaIP, relayIP := keaNS.Address.String(), relayNS.Address.String()
	dir := b.TempDir()
	macs, keaConfPath, keaLog, inv := perfdhcpInventory(b, dir, keaNS.Interface, keaIP, relayIP)

	var ours, kea perfdhcpResult
	b.ResetTimer()
	for range b.N {
		stop := startDHCP(b, dhcp.Config{ServerIP: n.Gateway, HTTPBase: "http://" + n.Gateway.String() + ":8080",
			ListenAddr: netip.AddrPortFrom(n.Gateway, 67)}, inv)
		r := runPerfdhcp(b, relayNS.NamespacePath, relayIP, n.Gateway.String(), macs, 20000)
		stop()
		ours.rate += r.rate
		ours.avgDelayMs += r.avgDelayMs
		ours.dropsPct += r.dropsPct

		r = runKea(b, dir, keaConfPath, keaLog, keaNS.NamespacePath, relayNS.NamespacePath, relayIP, keaIP, macs)
		kea.rate += r.rate
		kea.avgDelayMs += r.avgDelayMs
		kea.dropsPct += r.dropsPct
	}
	b.StopTimer()
	nf := float64(b.N)
	b.ReportMetric(ours.rate/nf, "yonder-offers/s")
	b.ReportMetric(kea.rate/nf, "kea-offers/s")
	b.ReportMetric(ours.rate/kea.rate, "yonder/kea")
	b.ReportMetric(ours.avgDelayMs/nf, "yonder-avg-ms")
	b.ReportMetric(kea.avgDelayMs/nf, "kea-avg-ms")
	b.ReportMetric(ours.dropsPct/nf, "yonder-drop-%")
	b.ReportMetric(kea.dropsPct/nf, "kea-drop-%")
}

// perfdhcpReservations is the number of host reservations (and perfdhcp's client MACs): the 10,000,
// or a few hundred when the suite runs the benchmark at its tiny size (perfdhcp then also runs 1 s per
// server instead of 5 s), where it only has to work.
func perfdhcpReservations() int { return benchsize.Pick(10000, 300) }

// perfdhcpInventory writes 10,000 host reservations for our server (inv), for Kea (its configuration,
// answering relayIP on iface/keaIP) and for perfdhcp (one MAC a line).
func perfdhcpInventory(b *testing.B, dir, iface, keaIP, relayIP string) (macs, keaConfPath, keaLog string, inv *inventory.Static) {
	b.Helper()
	macs = filepath.Join(dir, "macs.txt")
	inv = inventory.NewStatic()
	var macLines []string
	var reservations []map[string]string
	for i := range perfdhcpReservations() {
		mac := net.HardwareAddr{0x52, 0x54, 0x01, byte(i >> 16), byte(i >> 8), byte(i)}
		addr := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		inv.Set(inventory.Host{Name: fmt.Sprintf("metal/h%d", i), MAC: mac, Address: addr, PrefixLen: 16})
		macLines = append(macLines, mac.String())
		reservations = append(reservations, map[string]string{"hw-address": mac.String(), "ip-address": addr.String()})
	}
	if err := os.WriteFile(macs, []byte(strings.Join(macLines, "\n")+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	keaLog = filepath.Join(dir, "kea.log")
	keaConf, _ := json.Marshal(map[string]any{"Dhcp4": map[string]any{
		"interfaces-config":            map[string]any{"interfaces": []string{iface + "/" + keaIP}, "dhcp-socket-type": "udp"},
		"lease-database":               map[string]any{"type": "memfile", "persist": false},
		"valid-lifetime":               3600,
		"host-reservation-identifiers": []string{"hw-address"},
		"subnet4": []any{map[string]any{"id": 1, "subnet": "198.18.0.0/16", "relay": map[string]any{"ip-addresses": []string{relayIP}},
			"reservations": reservations, "reservations-out-of-pool": true}},
		"loggers": []any{map[string]any{"name": "kea-dhcp4", "severity": "INFO",
			"output_options": []any{map[string]any{"output": keaLog}}}},
	}})
	keaConfPath = filepath.Join(dir, "kea.json")
	if err := os.WriteFile(keaConfPath, keaConf, 0o600); err != nil {
		b.Fatal(err)
	}

	return macs, keaConfPath, keaLog, inv
}

// runKea starts kea-dhcp4 with keaConfPath in the network namespace keaNS, drives it with perfdhcp (in
// relayNS) and stops it.
func runKea(b *testing.B, dir, keaConfPath, keaLog, keaNS, relayNS, relayIP, keaIP, macs string) perfdhcpResult {
	b.Helper()
	k := exec.Command("nsenter", "--net="+keaNS, "kea-dhcp4", "-c", keaConfPath)
	k.Env = append(os.Environ(), "KEA_PIDFILE_DIR="+dir, "KEA_LOCKFILE_DIR="+dir)
	child, err := deathsig.Start(k)
	if err != nil {
		b.Fatal(err)
	}
	stopped := false
	b.Cleanup(func() {
		if !stopped { // stop this kea by its pid if the benchmark failed before it did
			_ = syscall.Kill(k.Process.Pid, syscall.SIGKILL)
			<-child.Done()
		}
	})
	NewWithT(b).Eventually(func() string { log, _ := os.ReadFile(keaLog); return string(log) }, 30*time.Second, 100*time.Millisecond).
		Should(ContainSubstring("DHCP4_STARTED"), "kea-dhcp4 started")
	r := runPerfdhcp(b, relayNS, relayIP, keaIP, macs, 20000)
	_ = syscall.Kill(k.Process.Pid, syscall.SIGTERM)
	<-child.Done()
	stopped = true
	_ = os.Remove(keaLog)
	return r
}
