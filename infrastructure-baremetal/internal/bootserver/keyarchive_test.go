package bootserver_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// With a signing key, a host boots the server's public key as a second initrd after its image's: the
// script names it (and the kernel's initrd= lists both, for EFI), and the archive served holds the key
// where the agent looks for a served key. A host without an initrd gets no key archive; a key that is
// not an Ed25519 public key is refused when the server is configured.
func TestServerKeyIsBootedAfterTheImage(t *testing.T) {
	g := NewWithT(t)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0xcd, 0x10}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/h", MAC: mac,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "yonder-initrd.img", Cmdline: "console=ttyS0"}})
	const base = "http://192.0.2.1:8080"
	bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Lookup: inv, ServerKey: pub}, testr.New(t), nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = bs.Close() })

	script, err := bs.ScriptFor(inventory.Host{Name: "metal/h", MAC: mac,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "yonder-initrd.img", Cmdline: "console=ttyS0"}}, netip.MustParseAddr("192.0.2.10"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(script, "\n")).To(Equal([]string{
		"#!ipxe", "echo Yonder: booting metal/h",
		"kernel " + base + "/artifacts/vmlinuz initrd=initrd initrd=" + bootserver.KeyInitrdName + " console=ttyS0 yonder.server=" + base,
		"initrd --name initrd " + base + "/artifacts/yonder-initrd.img",
		"initrd --name " + bootserver.KeyInitrdName + " " + base + bootserver.KeyArchivePath,
		"boot", "",
	}))
	noInitrd, err := bs.ScriptFor(inventory.Host{Name: "metal/h", MAC: mac, Boot: inventory.BootConfig{Kernel: "vmlinuz"}}, netip.MustParseAddr("192.0.2.10"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(noInitrd).NotTo(ContainSubstring("initrd"))

	srv := httptest.NewServer(bs.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + bootserver.KeyArchivePath)
	g.Expect(err).NotTo(HaveOccurred())
	archive, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	dir := t.TempDir()
	cmd := exec.Command("/bin/busybox", "cpio", "-i", "-d", "-H", "newc")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(archive)
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	pemKey, err := os.ReadFile(filepath.Join(dir, bootserver.ServedServerKeyFile))
	g.Expect(err).NotTo(HaveOccurred())
	got, err := attest.ParseServerKey(pemKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(pub))

	_, err = bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Lookup: inv, ServerKey: pub[:16]}, testr.New(t), nil)
	g.Expect(err).To(MatchError(ContainSubstring("not an Ed25519 public key")))
}
