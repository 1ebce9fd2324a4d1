package main

import (
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/metalboot"
)

// The boot image a user builds carries the agent, the init that runs attest and provision, and exactly the
// public key they named; the generic image (a release's) carries no key and no permission to run unsigned
// instructions: its agent uses the key the boot server serves, or refuses.
func TestBootImageCarriesTheAgentAndTheKey(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	keyDir := t.TempDir()
	_, pub, err := metalboot.GenerateSigningKey(keyDir)
	g.Expect(err).NotTo(HaveOccurred())
	pubFile := filepath.Join(keyDir, "boot-server.pub")
	g.Expect(os.WriteFile(pubFile, pub, 0o600)).To(Succeed())

	notAKey := filepath.Join(keyDir, "not-a-key.pem")
	g.Expect(os.WriteFile(notAKey, []byte("hello"), 0o600)).To(Succeed())
	g.Expect(run(ctx, []string{"-out", t.TempDir(), "-server-key", notAKey})).To(MatchError(ContainSubstring("no PEM PUBLIC KEY")))
	g.Expect(run(ctx, []string{"-out", t.TempDir(), "-server-key", pubFile, "-insecure-unsigned"})).To(MatchError(ContainSubstring("alternatives")))

	out := filepath.Join(t.TempDir(), "boot")
	g.Expect(run(ctx, []string{"-out", out, "-server-key", pubFile})).To(Succeed())
	tree := unpack(t, out)
	g.Expect(os.ReadFile(filepath.Join(tree, "etc", "yonder", "boot-server.pub"))).To(Equal(pub))
	g.Expect(filepath.Join(tree, "etc", "yonder", "insecure-unsigned")).NotTo(BeAnExistingFile())

	generic := filepath.Join(t.TempDir(), "boot")
	g.Expect(run(ctx, []string{"-out", generic})).To(Succeed())
	gtree := unpack(t, generic)
	g.Expect(filepath.Join(gtree, "etc", "yonder", "boot-server.pub")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(gtree, "etc", "yonder", "insecure-unsigned")).NotTo(BeAnExistingFile())

	initScript, err := os.ReadFile(filepath.Join(tree, "init"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(initScript)).To(And(ContainSubstring("yonder-agent attest"), ContainSubstring("yonder-agent provision")))
	agent := exec.Command(filepath.Join(tree, "bin", "yonder-agent"), "provision", "--help")
	b, err := agent.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(b))
	g.Expect(string(b)).To(ContainSubstring("carry out the attested instructions"))
	g.Expect(filepath.Join(tree, "lib", "modules", "virtio_blk.ko")).To(BeARegularFile(), "the ramdisk can see a virtio disk")
	expectNodeHost(t, gtree)
}

// expectNodeHost checks that the image carries what a diskless Node needs of its host: the programs run
// inside the tree (chroot) with only the libraries the image carries, and the node modules are indexed.
func expectNodeHost(t *testing.T, tree string) {
	t.Helper()
	g := NewWithT(t)
	for tool, says := range map[string]string{
		"systemd-nspawn": "systemd ", "tar": "GNU tar", "curl": "curl ", "nsenter": "util-linux",
	} {
		b, err := exec.Command("chroot", tree, "/usr/bin/"+tool, "--version").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s runs with the image's own libraries: %s", tool, b)
		g.Expect(string(b)).To(ContainSubstring(says))
	}
	g.Expect(filepath.Join(tree, "usr", "lib", "os-release")).To(BeARegularFile(), "systemd-nspawn mounts it into the machine")
	g.Expect(filepath.Join(tree, "etc", "ssl", "certs", "ca-certificates.crt")).To(BeARegularFile())
	kvers, err := filepath.Glob(filepath.Join(tree, "lib", "modules", "*", "modules.dep"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kvers).To(HaveLen(1), "one kernel's node modules, indexed")
	dep, err := os.ReadFile(kvers[0])
	g.Expect(err).NotTo(HaveOccurred())
	roots, err := os.ReadFile(filepath.Join(filepath.Dir(kvers[0]), "yonder-node-modules"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range []string{"br_netfilter", "overlay", "vxlan", "wireguard", "nf_tables", "xt_conntrack", "veth", "crc32c_generic"} {
		g.Expect(strings.Split(string(roots), "\n")).To(ContainElement(m), "init loads %s", m)
		g.Expect(string(dep)).To(MatchRegexp(`(?m)/`+m+`\.ko:`), "modprobe finds %s and its dependencies", m)
	}
}

// unpack extracts the boot image's initramfs in dir into a new directory.
func unpack(t *testing.T, dir string) string {
	t.Helper()
	g := NewWithT(t)
	kernel, err := os.Stat(filepath.Join(dir, metalboot.Kernel))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kernel.Size()).To(BeNumerically(">", 1<<20))
	f, err := os.Open(filepath.Join(dir, metalboot.Initrd))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	g.Expect(err).NotTo(HaveOccurred())
	tree := t.TempDir()
	cpio := exec.Command("busybox", "cpio", "-i", "-d", "-m")
	cpio.Dir, cpio.Stdin = tree, zr
	b, err := cpio.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(b))
	return tree
}
