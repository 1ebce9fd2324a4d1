package netboot_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/test/labnet"
)

// counter sums a counter family's samples whose labels include want.
func counter(reg *prometheus.Registry, name string, want map[string]string) float64 {
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// TestQEMUSeaBIOSiPXEBoot boots a QEMU VM (software emulation) whose NIC ROM is Debian's iPXE from a tap on
// the lab bridge: DHCP from our server → iPXE → this host's script over HTTP → the kernel it names.
func TestQEMUSeaBIOSiPXEBoot(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// Debian's ipxe package: a BIOS iPXE ROM for virtio 1.0 (PCI id 1af4:1041). SeaBIOS runs a PCI ROM only
	// when its id matches the device, hence disable-legacy=on below (QEMU's default is transitional 1af4:1000).
	rom := "/usr/lib/ipxe/virtio-net.rom"
	for _, need := range []string{"qemu-system-x86_64", rom} {
		if _, err := exec.LookPath(need); err != nil {
			if _, serr := os.Stat(need); serr != nil {
				t.Fatalf("%s is missing: run `hack/test-bins.sh --packages` (installs qemu-system-x86, ipxe)", need)
			}
		}
	}
	n := labnet.NewForTest(t)
	tap := fmt.Sprintf("yq%dt0", n.Slot)
	for _, args := range [][]string{{"tuntap", "add", "dev", tap, "mode", "tap"}, {"link", "set", tap, "master", n.Bridge}, {"link", "set", tap, "up"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
	}
	n.OnClose(func() error { _ = exec.Command("ip", "link", "del", tap).Run(); return nil })

	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, byte(n.Slot), 0x01}
	artifacts := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(artifacts, "vmlinuz"), []byte("not a kernel"), 0o644)).To(Succeed())
	inv := inventory.NewStatic(inventory.Host{Name: "metal/vm-0", MAC: mac,
		Address: netip.AddrFrom4([4]byte{10, 250, byte(n.Slot), 100}),
		Boot:    inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}})
	reg := prometheus.NewRegistry()
	svcs, err := netboot.Start(ctx, netboot.Config{Interface: n.Bridge, ServerIP: n.Gateway, HTTPPort: 0, TFTPPort: 0,
		ArtifactsDir: artifacts, DHCP: dhcp.Config{Router: n.Gateway}}, inv, attest.NewMemoryStore(), reg,
		testr.NewWithOptions(t, testr.Options{Verbosity: 2}))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = svcs.Stop() })

	dir := t.TempDir()
	serial := filepath.Join(dir, "serial.log")
	qemu := exec.Command("qemu-system-x86_64", "-machine", "pc,accel=tcg", "-m", "128", "-smp", "1",
		"-display", "none", "-nodefaults", "-no-reboot", "-serial", "file:"+serial, "-boot", "n",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,disable-legacy=on,netdev=n0,mac="+mac.String()+",romfile="+rom)
	log, err := os.Create(filepath.Join(dir, "qemu.log"))
	g.Expect(err).NotTo(HaveOccurred())
	qemu.Stdout, qemu.Stderr = log, log
	qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	g.Expect(qemu.Start()).To(Succeed())
	t.Cleanup(func() {
		// iPXE cannot power off: stop QEMU by its pid.
		_ = syscall.Kill(qemu.Process.Pid, syscall.SIGKILL)
		_ = qemu.Wait()
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			sb, _ := os.ReadFile(serial)
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				t.Logf("metric %s: %v", mf.GetName(), mf.GetMetric())
			}
			t.Logf("qemu output:\n%s\nserial:\n%s", b, sb)
		}
	})

	g.Eventually(func() float64 {
		return counter(reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "ack"})
	}, 90*time.Second, 200*time.Millisecond).Should(BeNumerically(">=", 1), "the VM's iPXE got its lease")
	leased := time.Since(start)
	g.Eventually(func() float64 {
		return counter(reg, "yonder_metal_http_requests_total", map[string]string{"handler": "ipxe", "code": "200"})
	}, 2*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE fetched this host's script over HTTP")
	scripted := time.Since(start)
	g.Eventually(func() float64 {
		return counter(reg, "yonder_metal_http_requests_total", map[string]string{"handler": "artifacts", "code": "200"})
	}, time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE ran the script and fetched its kernel")
	t.Logf("QEMU (TCG) SeaBIOS iPXE: lease after %s, script after %s, kernel requested after %s",
		leased.Round(time.Millisecond), scripted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
