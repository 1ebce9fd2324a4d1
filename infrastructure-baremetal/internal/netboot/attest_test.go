package netboot_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/test/labnet"
)

// TestScriptTicketReleasesDataToTheTPM follows the ticket from the iPXE script a host fetches (curl in a
// lab namespace) through attestation with a real swtpm to the bootstrap data, on the full service stack.
func TestScriptTicketReleasesDataToTheTPM(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	host, err := n.Attach(ctx, "agent")
	g.Expect(err).NotTo(HaveOccurred())
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x7f, byte(n.Slot), 0x02}
	// The host's DHCP reservation is its namespace's address: its script and its ticket are bound to it.
	inv := inventory.NewStatic(inventory.Host{Name: "metal/host-7", MAC: mac, Address: host.Address,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"}})
	roots, intermediates := swtpmRoots(t)
	store := attest.NewMemoryStore()
	store.SetBootstrapData("metal/host-7", []byte("join-config-for-host-7"))
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
	server, ticket := wire.ParseCmdline(kernelLine)
	g.Expect(server).To(Equal("http://" + svcs.HTTPAddr.String()))
	g.Expect(ticket).NotTo(BeEmpty())

	sw := startSwtpm(t)
	conn, err := wire.OpenTPM(sw.Socket)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	keys, err := wire.LoadKeys(conn)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = keys.Close() }()

	// The agent runs on the host: its requests come from the host's address.
	client := &wire.Client{Server: server, HTTP: &http.Client{Transport: &http.Transport{DialContext: host.DialContext}}}
	data, err := client.Attest(ctx, ticket, keys)
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionLive))
	g.Expect(string(in.UserData)).To(Equal("join-config-for-host-7"))
	g.Expect(store.LastReason("metal/host-7")).To(Equal(attest.ReasonReleased))

	_, err = client.Attest(ctx, ticket, keys)
	var refused *wire.RefusedError
	g.Expect(errors.As(err, &refused)).To(BeTrue())
	g.Expect(refused.Reason).To(Equal(wire.ReasonUnknownTicket), "the ticket was spent by the first boot")
}

// swtpmRoots loads swtpm-localca's CA, the vendor root of every swtpm these tests manufacture.
func swtpmRoots(t *testing.T) (roots, intermediates *x509.CertPool) {
	t.Helper()
	root, intermediate, err := swtpm.LocalCA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if roots, err = attest.LoadCertPool(root); err != nil {
		t.Fatal(err)
	}
	if intermediates, err = attest.LoadCertPool(intermediate); err != nil {
		t.Fatal(err)
	}
	return roots, intermediates
}
