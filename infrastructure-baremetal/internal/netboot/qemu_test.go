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

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/pkg/deathsig"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/promread"
)

// Debian's ipxe package: a BIOS iPXE ROM for virtio 1.0 (PCI id 1af4:1041). SeaBIOS runs a PCI ROM only
// when its id matches the device, hence disable-legacy=on below (QEMU's default is transitional 1af4:1000).
const ipxeROM = "/usr/lib/ipxe/virtio-net.rom"

// vmLab is a lab network with our boot services on its bridge and a tap for one QEMU VM.
type vmLab struct {
	n    *labnet.Network
	tap  string
	mac  net.HardwareAddr
	reg  *prometheus.Registry
	svcs *netboot.Services
}

func startVMLab(t *testing.T, cfg netboot.Config) *vmLab {
	t.Helper()
	g := NewWithT(t)
	for _, need := range []string{"qemu-system-x86_64", ipxeROM} {
		if _, err := exec.LookPath(need); err != nil {
			if _, serr := os.Stat(need); serr != nil {
				t.Fatalf("%s is missing: run `hack/test-bins.sh --packages` (installs qemu-system-x86, ipxe)", need)
			}
		}
	}
	n := labnet.NewForTest(t)
	l := &vmLab{n: n, tap: fmt.Sprintf("yq%dt0", n.Slot), mac: net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, byte(n.Slot), 0x01},
		reg: prometheus.NewRegistry()}
	// This process holds the slot's lock, so a tap of that name is a leftover of a crashed earlier holder.
	if labnet.LinkExists(l.tap) {
		_ = exec.Command("ip", "link", "del", l.tap).Run()
	}
	for _, args := range [][]string{{"tuntap", "add", "dev", l.tap, "mode", "tap"}, {"link", "set", l.tap, "master", n.Bridge}, {"link", "set", l.tap, "up"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
	}
	n.OnClose(func() error { _ = exec.Command("ip", "link", "del", l.tap).Run(); return nil })

	artifacts := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(artifacts, "vmlinuz"), []byte("not a kernel"), 0o644)).To(Succeed())
	inv := inventory.NewStatic(inventory.Host{Name: "metal/vm-0", MAC: l.mac,
		Address: netip.AddrFrom4([4]byte{10, 250, byte(n.Slot), 100}),
		Boot:    inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}})
	cfg.Interface, cfg.ServerIP, cfg.ArtifactsDir = n.Bridge, n.Gateway, artifacts
	cfg.DHCP.Router = n.Gateway
	var err error
	l.svcs, err = netboot.Start(context.Background(), cfg, inv, attest.NewMemoryStore(), l.reg,
		testr.NewWithOptions(t, testr.Options{Verbosity: 2}))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = l.svcs.Stop() })
	return l
}

// boot starts a SeaBIOS VM whose NIC ROM is iPXE; it is stopped by pid (iPXE cannot power off) when the
// test ends.
func (l *vmLab) boot(t *testing.T) time.Time {
	t.Helper()
	return l.bootWith(t, "virtio-net-pci,disable-legacy=on,netdev=n0,mac="+l.mac.String()+",romfile="+ipxeROM)
}

// OVMF (UEFI firmware, Debian package ovmf) with its built-in virtio-net driver and PXE.
const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// bootUEFI starts an OVMF VM that network-boots with the firmware's own PXE (no option ROM).
func (l *vmLab) bootUEFI(t *testing.T) time.Time {
	t.Helper()
	vars, err := os.ReadFile(ovmfVars)
	if err != nil {
		t.Fatalf("OVMF is missing: run `hack/test-bins.sh --packages` (installs ovmf): %v", err)
	}
	varsCopy := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
	if err := os.WriteFile(varsCopy, vars, 0o600); err != nil {
		t.Fatal(err)
	}
	return l.bootWith(t, "virtio-net-pci,netdev=n0,mac="+l.mac.String()+",romfile=",
		"-drive", "if=pflash,format=raw,readonly=on,file="+ovmfCode, "-drive", "if=pflash,format=raw,file="+varsCopy)
}

func (l *vmLab) bootWith(t *testing.T, nic string, extra ...string) time.Time {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"-machine", "pc,accel=tcg", "-m", "256", "-smp", "1",
		"-display", "none", "-nodefaults", "-no-reboot", "-boot", "n",
		"-netdev", "tap,id=n0,ifname=" + l.tap + ",script=no,downscript=no", "-device", nic,
		"-debugcon", "file:" + filepath.Join(dir, "seabios.log"), "-global", "isa-debugcon.iobase=0x402"}, extra...)
	qemu := exec.Command("qemu-system-x86_64", args...)
	log, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		t.Fatal(err)
	}
	qemu.Stdout, qemu.Stderr = log, log
	start := time.Now()
	qemuChild, err := deathsig.Start(qemu)
	if err != nil {
		t.Fatalf("failed to start QEMU: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(qemu.Process.Pid, syscall.SIGKILL)
		<-qemuChild.Done()
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			sb, _ := os.ReadFile(filepath.Join(dir, "seabios.log"))
			mfs, _ := l.reg.Gather()
			for _, mf := range mfs {
				t.Logf("metric %s: %v", mf.GetName(), mf.GetMetric())
			}
			t.Logf("qemu output:\n%s\nSeaBIOS debug log:\n%s", b, sb)
		}
	})
	return start
}

// waitForScriptAndKernel waits until iPXE fetched this host's script and the kernel it names.
func (l *vmLab) waitForScriptAndKernel(t *testing.T, start time.Time) time.Duration {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "ipxe", "code": "200"})
	}, 2*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE fetched this host's script over HTTP")
	scripted := time.Since(start)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "artifacts", "code": "200"})
	}, time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE ran the script and fetched its kernel")
	return scripted
}

// TestQEMUSeaBIOSiPXEBoot boots a QEMU VM (software emulation) whose NIC ROM is Debian's iPXE from a tap on
// the lab bridge: DHCP from our server → iPXE → this host's script over HTTP → the kernel it names.
func TestQEMUSeaBIOSiPXEBoot(t *testing.T) {
	g := NewWithT(t)
	l := startVMLab(t, netboot.Config{HTTPPort: 8080, TFTPPort: 69})
	start := l.boot(t)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "ack"})
	}, 2*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "the VM's iPXE got its lease")
	leased := time.Since(start)
	scripted := l.waitForScriptAndKernel(t, start)
	t.Logf("QEMU (TCG) SeaBIOS iPXE: lease after %s, script after %s", leased.Round(time.Millisecond), scripted.Round(time.Millisecond))
}

// TestQEMUProxyDHCP: the network's own DHCP server (busybox udhcpd in a namespace on the bridge) leases the
// address; ours, in proxyDHCP mode, adds only the boot options (port 67 offer, port 4011 boot request).
func TestQEMUProxyDHCP(t *testing.T) {
	g := NewWithT(t)
	l := startVMLab(t, netboot.Config{HTTPPort: 8080, TFTPPort: 69, DHCP: dhcp.Config{ProxyDHCP: true}})
	router, err := l.n.Attach(context.Background(), "udhcpd")
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	conf := filepath.Join(dir, "udhcpd.conf")
	prefix := fmt.Sprintf("10.250.%d.", l.n.Slot)
	g.Expect(os.WriteFile(conf, []byte(fmt.Sprintf("start %s150\nend %s160\ninterface %s\nlease_file %s\npidfile %s\n"+
		"opt subnet 255.255.255.0\nopt router %s\n", prefix, prefix, router.Interface, filepath.Join(dir, "leases"),
		filepath.Join(dir, "pid"), l.n.Gateway)), 0o600)).To(Succeed())
	udhcpd := exec.Command("nsenter", "--net="+router.NamespacePath, "busybox", "udhcpd", "-f", conf)
	udhcpdChild, err := deathsig.Start(udhcpd)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = syscall.Kill(udhcpd.Process.Pid, syscall.SIGKILL); <-udhcpdChild.Done() })

	start := l.boot(t)
	scripted := l.waitForScriptAndKernel(t, start)
	g.Expect(promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "proxy_offer"})).To(BeNumerically(">=", 1))
	g.Expect(promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "ack"})).To(BeZero(), "we never lease in proxy mode")
	t.Logf("QEMU (TCG) SeaBIOS iPXE with proxyDHCP: script after %s; our replies: offer %v, boot ack %v",
		scripted.Round(time.Millisecond),
		promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "proxy_offer"}),
		promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "proxy_ack"}))
}

// TestQEMUOVMFPXEToIPXE: UEFI firmware PXE (option 93 = 7) gets ipxe.efi over our TFTP (after its size
// probe), then iPXE gets this host's script over HTTP. Slow under software emulation.
func TestQEMUOVMFPXEToIPXE(t *testing.T) {
	g := NewWithT(t)
	l := startVMLab(t, netboot.Config{HTTPPort: 8080, TFTPPort: 69})
	start := l.bootUEFI(t)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_tftp_transfers_total", map[string]string{"result": "ok"})
	}, 4*time.Minute, 500*time.Millisecond).Should(BeNumerically(">=", 1), "OVMF fetched ipxe.efi over TFTP")
	fetched := time.Since(start)
	scripted := l.waitForScriptAndKernel(t, start)
	t.Logf("QEMU (TCG) OVMF: ipxe.efi over TFTP after %s, script over HTTP after %s", fetched.Round(time.Millisecond), scripted.Round(time.Millisecond))
}
