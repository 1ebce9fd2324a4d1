package netboot_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/pkg/deathsig"
	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/promread"
)

// TestRogueDHCPServerWinsTheRaceAndIsRefused plays the boot-LAN attack through DHCP, as a host meets it:
// a rogue machine on the boot LAN (its own namespace on the lab bridge) runs a DHCP server (busybox
// udhcpd) that answers the host first and names its own boot script, served with its own real boot HTTP
// server and attestation service. The host does what its boot chain does — a real DHCP client (udhcpc,
// as iPXE: user class "iPXE") takes the lease, fetches the script the lease names, and the boot image's
// `yonder-agent attest`, with the provider's key built in, attests a real swtpm against the yonder.server=
// that script set. The rogue gets as far as releasing its data; the agent refuses it by name
// (EnvelopeNotSignedByProvider) and writes nothing, and the provider's services, live on the same LAN,
// record nothing against the host. With the rogue gone, the same host boots the provider's chain.
//
// Which DHCP server a client takes is a race (udhcpc, like PXE firmware and iPXE, takes the first OFFER).
// The test makes the rogue win it every time by starting the provider's services only after the host
// leased from the rogue; they run from then on, while the host fetches the rogue's script and attests.
// Letting both answer the same DISCOVER would only sometimes test the attack.
func TestRogueDHCPServerWinsTheRaceAndIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	agentBin := gobuild.ForTest(t, "./hostruntime/cmd/yonder-agent", gobuild.Options{})
	n := labnet.NewForTest(t)
	victim, err := n.Attach(ctx, "rdhcp-victim")
	g.Expect(err).NotTo(HaveOccurred())
	rogueNS, err := n.Attach(ctx, "rdhcp-rogue")
	g.Expect(err).NotTo(HaveOccurred())
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x7c, byte(n.Slot), 0x05}
	out, err := exec.Command("ip", "-n", victim.Namespace, "link", "set", "dev", victim.Interface, "address", mac.String()).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	signer, serverKey := signingKey(t) // the provider's key; its public half is built into the host's boot image

	// The rogue: boot HTTP server and attestation service on its own address, and a DHCP server whose
	// leases name its script (file field, as ours does for iPXE) and itself as next server.
	ln, err := rogueNS.Listen("tcp4", rogueNS.Address.String()+":8080")
	g.Expect(err).NotTo(HaveOccurred())
	rogueBase, _, rogueStore := startRogueBootServer(t, ln, mac)
	stopRogueDHCP := startUdhcpd(t, rogueNS, fmt.Sprintf("boot_file %s/ipxe/%s\nsiaddr %s\n", rogueBase, mac, rogueNS.Address))

	// The host's first DHCP exchange: the rogue is the only server that answers it.
	lease := udhcpcLease(t, victim)
	g.Expect(lease).To(HaveKeyWithValue("serverid", rogueNS.Address.String()))
	g.Expect(lease).To(HaveKeyWithValue("boot_file", rogueBase+"/ipxe/"+mac.String()))

	// The provider's boot services, with this host reserved at the address it has on the lab network.
	inv := inventory.NewStatic(inventory.Host{Name: "metal/host-9", MAC: mac, Address: victim.Address,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}})
	roots, intermediates := swtpmRoots(t)
	store := attest.NewMemoryStore()
	store.SetBootstrapData("metal/host-9", []byte("join-config-for-host-9"))
	reg := prometheus.NewRegistry()
	svcs, err := netboot.Start(ctx, netboot.Config{Interface: n.Bridge, ServerIP: n.Gateway, HTTPPort: 8080, TFTPPort: 69,
		ArtifactsDir: t.TempDir(), Attestation: attest.Config{EKRoots: roots, EKIntermediates: intermediates, SigningKey: signer}},
		inv, store, reg, testr.New(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = svcs.Stop() })

	// The boot chain follows the lease: the rogue's script, its yonder.server= and ticket, the agent.
	sw := startSwtpm(t)
	work := t.TempDir()
	cmdline := filepath.Join(work, "cmdline")
	server, ticket := wire.ParseCmdline(bootCmdline(t, victim, lease["boot_file"], cmdline))
	g.Expect(server).To(Equal(rogueBase))
	g.Expect(ticket).NotTo(BeEmpty())
	output := filepath.Join(work, "rogue", "bootstrap-data")
	msg, err := agentAttest(victim, agentBin, sw.Socket, cmdline, output, "--server-key", serverKey)
	g.Expect(err).To(HaveOccurred(), msg)
	g.Expect(msg).To(ContainSubstring("refusing the bootstrap data from " + rogueBase + ": " + wire.ReasonEnvelopeNotSigned))
	g.Expect(rogueStore.LastReason(rogueHost)).To(Equal(attest.ReasonReleased), "the rogue ran the protocol to its end: only the signature stopped it")
	for _, f := range []string{output, agentInstructions(output)} {
		_, err = os.Stat(f)
		g.Expect(err).To(MatchError(os.ErrNotExist), "the agent wrote nothing the image would run")
	}

	// The provider saw nothing of it: no attestation step, no refusal (fatal or not), no enrolment, the
	// host's data still waiting for it, its script never asked for.
	g.Expect(store.Results("metal/host-9")).To(BeEmpty())
	g.Expect(store.Enrolment(ctx, "metal/host-9")).To(BeNil())
	g.Expect(promread.Sum(reg, "yonder_metal_attestation_results_total", nil)).To(BeZero())
	g.Expect(promread.Sum(reg, "yonder_metal_http_requests_total", map[string]string{"handler": "ipxe"})).To(BeZero())
	data, err := store.Instructions(ctx, "metal/host-9")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring(`"version"`))

	// The rogue is gone: the host's next boot leases from the provider and its genuine chain releases
	// the data to the same TPM.
	stopRogueDHCP()
	lease = udhcpcLease(t, victim)
	g.Expect(lease).To(HaveKeyWithValue("serverid", n.Gateway.String()))
	g.Expect(lease).To(HaveKeyWithValue("ip", victim.Address.String()))
	server, _ = wire.ParseCmdline(bootCmdline(t, victim, lease["boot_file"], cmdline))
	g.Expect(server).To(Equal("http://" + svcs.HTTPAddr.String()))
	output = filepath.Join(work, "provider", "bootstrap-data")
	msg, err = agentAttest(victim, agentBin, sw.Socket, cmdline, output, "--server-key", serverKey)
	g.Expect(err).NotTo(HaveOccurred(), msg)
	got, err := os.ReadFile(output)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("join-config-for-host-9"))
	g.Expect(store.LastReason("metal/host-9")).To(Equal(attest.ReasonReleased))
}

// startUdhcpd runs busybox udhcpd in the attachment's namespace, leasing from .150-.160 of the lab network
// with extra configuration lines; the returned function stops it (also run at cleanup).
func startUdhcpd(t *testing.T, a *labnet.Attachment, extra string) func() {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "udhcpd.conf")
	ip := a.Address.As4()
	prefix := fmt.Sprintf("%d.%d.%d.", ip[0], ip[1], ip[2])
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("start %s150\nend %s160\ninterface %s\nlease_file %s\npidfile %s\n"+
		"opt subnet 255.255.255.0\nopt router %s\n%s", prefix, prefix, a.Interface, filepath.Join(dir, "leases"),
		filepath.Join(dir, "pid"), a.Address, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+a.NamespacePath, "busybox", "udhcpd", "-f", conf)
	child, err := deathsig.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-child.Done()
		}
	}
	t.Cleanup(stop)
	return stop
}

// udhcpcLease runs busybox udhcpc in the host's namespace as iPXE asks (user class "iPXE"), applies the
// lease's address as the boot image's udhcpc script does, and returns the environment the script saw.
func udhcpcLease(t *testing.T, a *labnet.Attachment) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out, script := filepath.Join(dir, "lease.env"), filepath.Join(dir, "udhcpc.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncase \"$1\" in bound|renew)\n"+
		"  ip addr flush dev \"$interface\"; ip addr add \"$ip/$mask\" dev \"$interface\"; env > \"$YONDER_OUT\" ;;\nesac\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+a.NamespacePath, "busybox", "udhcpc", "-f", "-q", "-n", "-t", "5", "-T", "1",
		"-i", a.Interface, "-s", script, "-V", "PXEClient", "-x", "0x4d:69505845")
	cmd.Env = append(os.Environ(), "YONDER_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("udhcpc got no lease: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("udhcpc's script saw no lease: %v", err)
	}
	defer func() { _ = f.Close() }()
	env := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env
}
