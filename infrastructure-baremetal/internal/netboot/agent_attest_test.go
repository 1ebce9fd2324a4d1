package netboot_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/yonder-dev/yonder/test/gobuild"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/test/labnet"
)

// The boot step as a booted host runs it: `yonder-agent attest`, inside the host's network namespace,
// reads the server and ticket from the kernel command line its iPXE script set, attests a real swtpm and
// writes the released bootstrap data (0600); a second boot with the spent ticket is refused and says why.
func TestYonderAgentAttestCommand(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	agentBin := gobuild.ForTest(t, "./hostruntime/cmd/yonder-agent", gobuild.Options{})

	n := labnet.NewForTest(t)
	host, err := n.Attach(ctx, "attest-cli")
	g.Expect(err).NotTo(HaveOccurred())
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, byte(n.Slot), 0x03}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/host-8", MAC: mac, Address: host.Address,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"}})
	roots, intermediates := swtpmRoots(t)
	store := attest.NewMemoryStore()
	store.SetBootstrapData("metal/host-8", []byte("join-config-for-host-8"))
	svcs, err := netboot.Start(ctx, netboot.Config{Interface: n.Bridge, ServerIP: n.Gateway, HTTPPort: 8080, TFTPPort: 69,
		ArtifactsDir: t.TempDir(), Attestation: attest.Config{EKRoots: roots, EKIntermediates: intermediates}}, inv, store, prometheus.NewRegistry(), testr.New(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = svcs.Stop() })

	script, err := exec.Command("nsenter", "--net="+host.NamespacePath, "curl", "-sS", "--fail",
		"http://"+svcs.HTTPAddr.String()+"/ipxe/"+mac.String()).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(script))
	var kernelLine string
	for _, l := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(l, "kernel ") {
			kernelLine = l
		}
	}
	g.Expect(kernelLine).To(ContainSubstring("yonder.ticket="))
	work := t.TempDir()
	cmdline := filepath.Join(work, "cmdline")
	g.Expect(os.WriteFile(cmdline, []byte(strings.TrimPrefix(kernelLine, "kernel ")), 0o600)).To(Succeed())

	dir, err := os.MkdirTemp("", "yswtpm-")
	g.Expect(err).NotTo(HaveOccurred())
	sw, err := swtpm.Start(ctx, dir)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = sw.Stop(); _ = os.RemoveAll(dir) })

	output := filepath.Join(work, "run", "bootstrap-data")
	attestCmd := func() (string, error) {
		b, err := exec.Command("nsenter", "--net="+host.NamespacePath, agentBin, "attest",
			"--tpm", sw.Socket, "--cmdline", cmdline, "--output", output).CombinedOutput()
		return string(b), err
	}
	msg, err := attestCmd()
	g.Expect(err).NotTo(HaveOccurred(), msg)
	g.Expect(msg).To(ContainSubstring("attested"))
	data, err := os.ReadFile(output)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("join-config-for-host-8"))
	st, err := os.Stat(output)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(store.LastReason("metal/host-8")).To(Equal(attest.ReasonReleased))

	msg, err = attestCmd()
	g.Expect(err).To(HaveOccurred())
	g.Expect(msg).To(ContainSubstring("refused this host (UnknownTicket)"))
}
