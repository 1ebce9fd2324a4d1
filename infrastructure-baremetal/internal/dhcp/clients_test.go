package dhcp_test

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/test/labnet"
)

// lab is a lab network with our DHCP server on its bridge and one known and one unknown client namespace.
type lab struct {
	net      *labnet.Network
	known    *labnet.Attachment
	unknown  *labnet.Attachment
	knownMAC net.HardwareAddr
	reserved netip.Addr
	httpBase string
	metrics  *dhcp.Metrics
	dir      string
	inv      *inventory.Static
}

func startLab(t *testing.T) *lab {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	known, err := n.Attach(ctx, "dhcpk")
	g.Expect(err).NotTo(HaveOccurred())
	unknown, err := n.Attach(ctx, "dhcpu")
	g.Expect(err).NotTo(HaveOccurred())
	mac := nsMAC(t, known)
	reserved := netip.AddrFrom4([4]byte{10, 250, byte(n.Slot), 200})
	l := &lab{net: n, known: known, unknown: unknown, knownMAC: mac, reserved: reserved,
		httpBase: "http://" + n.Gateway.String() + ":8080", metrics: dhcp.NewMetrics(prometheus.NewRegistry()), dir: t.TempDir()}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/host-0", MAC: mac, Address: reserved, Hostname: "host-0"})
	l.inv = inv
	srv, err := dhcp.NewServer(dhcp.Config{
		Interface: n.Bridge, ServerIP: n.Gateway, HTTPBase: l.httpBase,
		Router: n.Gateway, DNS: []netip.Addr{n.Gateway}, LeaseTime: 10 * time.Minute,
	}, inv, testr.NewWithOptions(t, testr.Options{Verbosity: 4}), l.metrics)
	g.Expect(err).NotTo(HaveOccurred())
	ls, err := srv.Listen()
	g.Expect(err).NotTo(HaveOccurred())
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(sctx, ls) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func nsMAC(t *testing.T, a *labnet.Attachment) net.HardwareAddr {
	t.Helper()
	// Not /sys/class/net through nsenter: /sys stays the root namespace's view.
	out, err := exec.Command("ip", "-n", a.Namespace, "-o", "link", "show", a.Interface).Output()
	if err != nil {
		t.Fatalf("failed to read MAC of %s: %v", a.Namespace, err)
	}
	_, after, _ := strings.Cut(string(out), "link/ether ")
	mac, err := net.ParseMAC(strings.Fields(after + " x")[0])
	if err != nil {
		t.Fatalf("failed to parse MAC of %s: %v", a.Namespace, err)
	}
	return mac
}

// udhcpc runs busybox udhcpc once in the namespace and returns the environment its script saw on "bound".
func (l *lab) udhcpc(t *testing.T, a *labnet.Attachment, extra ...string) (map[string]string, error) {
	t.Helper()
	out := filepath.Join(l.dir, a.Namespace+"-"+strings.ReplaceAll(t.Name(), "/", "_")+".env")
	script := filepath.Join(l.dir, "udhcpc.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && env > \"$YONDER_OUT\"\nexit 0\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--net=" + a.NamespacePath, "busybox", "udhcpc", "-f", "-q", "-n", "-t", "3", "-T", "1",
		"-i", a.Interface, "-s", script, "-O", "175"}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = append(os.Environ(), "YONDER_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Logf("udhcpc output:\n%s", b)
		return nil, err
	}
	return readEnv(t, out), nil
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("client script wrote no lease: %v", err)
	}
	defer func() { _ = f.Close() }()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env
}

func TestUdhcpcGetsReservationAndBootOptions(t *testing.T) {
	l := startLab(t)
	gw := l.net.Gateway.String()
	cases := []struct {
		name     string
		args     []string
		bootFile string
		siaddr   string
	}{
		{name: "plain DHCP client gets the lease and no boot file"},
		{name: "BIOS PXE gets undionly.kpxe over TFTP", args: []string{"-V", "PXEClient:Arch:00000", "-x", "0x5d:0000"},
			bootFile: "undionly.kpxe", siaddr: gw},
		{name: "PXE without option 93 is treated as BIOS", args: []string{"-V", "PXEClient"}, bootFile: "undionly.kpxe", siaddr: gw},
		{name: "x86-64 UEFI PXE gets ipxe.efi", args: []string{"-V", "PXEClient:Arch:00007", "-x", "0x5d:0007"},
			bootFile: "ipxe.efi", siaddr: gw},
		{name: "arm64 UEFI PXE gets snp.efi", args: []string{"-V", "PXEClient:Arch:00011", "-x", "0x5d:000b"},
			bootFile: "snp.efi", siaddr: gw},
		{name: "UEFI HTTP boot gets an HTTP URL", args: []string{"-V", "HTTPClient:Arch:00016", "-x", "0x5d:0010"},
			bootFile: l.httpBase + "/artifacts/ipxe.efi"},
		{name: "iPXE gets its per-host script", args: []string{"-V", "PXEClient", "-x", "0x4d:69505845"},
			bootFile: l.httpBase + "/ipxe/" + l.knownMAC.String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			env, err := l.udhcpc(t, l.known, tc.args...)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(env).To(HaveKeyWithValue("ip", l.reserved.String()))
			g.Expect(env).To(HaveKeyWithValue("subnet", "255.255.255.0"))
			g.Expect(env).To(HaveKeyWithValue("router", gw))
			g.Expect(env).To(HaveKeyWithValue("dns", gw))
			g.Expect(env).To(HaveKeyWithValue("serverid", gw))
			g.Expect(env).To(HaveKeyWithValue("hostname", "host-0"))
			g.Expect(env).To(HaveKeyWithValue("lease", "600"))
			if tc.bootFile == "" {
				g.Expect(env).NotTo(HaveKey("boot_file"))
				g.Expect(env).NotTo(HaveKey("opt175"))
				return
			}
			g.Expect(env).To(HaveKeyWithValue("boot_file", tc.bootFile))
			g.Expect(env).To(HaveKeyWithValue("opt175", "b00101"), "175.176=1 lets iPXE skip the proxyDHCP wait")
			if tc.siaddr != "" {
				g.Expect(env).To(HaveKeyWithValue("siaddr", tc.siaddr))
				g.Expect(env).To(HaveKeyWithValue("tftp", tc.siaddr))
			}
		})
	}
}

// A provisioned host stays in the inventory lease-only: whatever client kind it boots as (its firmware
// falling back to PXE, UEFI HTTP boot, iPXE) it leases its reservation and is sent no boot file, no
// next-server, no TFTP server and no iPXE options.
func TestUdhcpcLeaseOnlyHostGetsNoBootFile(t *testing.T) {
	l := startLab(t)
	l.inv.Set(inventory.Host{Name: "metal/host-0", MAC: l.knownMAC, Address: l.reserved, Hostname: "host-0", LeaseOnly: true,
		Boot: inventory.BootConfig{Kernel: "vmlinuz"}})
	gw := l.net.Gateway.String()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "plain DHCP client (the OS)"},
		{name: "BIOS PXE", args: []string{"-V", "PXEClient:Arch:00000", "-x", "0x5d:0000"}},
		{name: "x86-64 UEFI PXE", args: []string{"-V", "PXEClient:Arch:00007", "-x", "0x5d:0007"}},
		{name: "UEFI HTTP boot", args: []string{"-V", "HTTPClient:Arch:00016", "-x", "0x5d:0010"}},
		{name: "iPXE", args: []string{"-V", "PXEClient", "-x", "0x4d:69505845"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			env, err := l.udhcpc(t, l.known, tc.args...)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(env).To(HaveKeyWithValue("ip", l.reserved.String()))
			g.Expect(env).To(HaveKeyWithValue("router", gw))
			g.Expect(env).To(HaveKeyWithValue("hostname", "host-0"))
			g.Expect(env).To(HaveKeyWithValue("lease", "600"))
			for _, k := range []string{"boot_file", "siaddr", "tftp", "opt175"} {
				g.Expect(env).NotTo(HaveKey(k))
			}
		})
	}
}

func TestUnknownMACGetsNothing(t *testing.T) {
	g := NewWithT(t)
	l := startLab(t)
	_, err := l.udhcpc(t, l.unknown, "-V", "PXEClient")
	g.Expect(err).To(HaveOccurred(), "udhcpc -n exits non-zero without a lease")
	g.Expect(testutil.ToFloat64(l.metrics.Requests.WithLabelValues(string(dhcp.OutcomeUnknownMAC)))).To(BeNumerically(">=", 3))
	g.Expect(testutil.ToFloat64(l.metrics.Requests.WithLabelValues(string(dhcp.OutcomeOffer)))).To(BeZero())
}

func TestDhclientGetsLeaseAndIPXEScript(t *testing.T) {
	l := startLab(t)
	for _, tc := range []struct {
		name, conf, filename string
	}{
		{name: "plain", conf: "request subnet-mask, routers, domain-name-servers, host-name;\n"},
		{name: "iPXE user class", conf: "send user-class \"iPXE\";\nsend vendor-class-identifier \"PXEClient\";\n" +
			"request subnet-mask, routers, domain-name-servers, host-name;\n", filename: l.httpBase + "/ipxe/" + l.knownMAC.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			out := filepath.Join(dir, "env")
			script := filepath.Join(dir, "dhclient-script")
			// Our own script: records what dhclient learned and never touches /etc/resolv.conf or routes.
			g.Expect(os.WriteFile(script, []byte("#!/bin/sh\ncase \"$reason\" in BOUND|REBOOT) env > \""+out+".tmp\" && mv \""+out+".tmp\" \""+out+"\";; esac\nexit 0\n"), 0o700)).To(Succeed())
			conf := filepath.Join(dir, "dhclient.conf")
			g.Expect(os.WriteFile(conf, []byte(tc.conf), 0o600)).To(Succeed())
			cmd := exec.Command("nsenter", "--net="+l.known.NamespacePath, "dhclient", "-4", "-d", "-1", "-v",
				"-sf", script, "-lf", filepath.Join(dir, "leases"), "-pf", filepath.Join(dir, "pid"), "-cf", conf, l.known.Interface)
			logFile, err := os.Create(filepath.Join(dir, "dhclient.log"))
			g.Expect(err).NotTo(HaveOccurred())
			cmd.Stdout, cmd.Stderr = logFile, logFile
			g.Expect(cmd.Start()).To(Succeed())
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				_ = logFile.Close()
				if t.Failed() {
					b, _ := os.ReadFile(logFile.Name())
					t.Logf("dhclient log:\n%s", b)
				}
			})
			g.Eventually(func() string { b, _ := os.ReadFile(out); return string(b) }, 30*time.Second, 100*time.Millisecond).
				ShouldNot(BeEmpty())
			env := readEnv(t, out)
			g.Expect(env).To(HaveKeyWithValue("new_ip_address", l.reserved.String()))
			g.Expect(env).To(HaveKeyWithValue("new_subnet_mask", "255.255.255.0"))
			g.Expect(env).To(HaveKeyWithValue("new_routers", l.net.Gateway.String()))
			g.Expect(env).To(HaveKeyWithValue("new_domain_name_servers", l.net.Gateway.String()))
			g.Expect(env).To(HaveKeyWithValue("new_host_name", "host-0"))
			if tc.filename != "" {
				g.Expect(env).To(HaveKeyWithValue("new_filename", tc.filename))
			} else {
				g.Expect(env).NotTo(HaveKey("new_filename"))
			}
		})
	}
}
