package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/yonder-dev/yonder/pkg/ociimage"

	. "github.com/onsi/gomega"
)

// The node daemon's image carries a working iptables: the image is built twice with the same digest, its
// layer is unpacked and the daemon's own commands (iptables through PATH, the rules of kernel.Clamp) run
// in it with chroot, inside a network namespace made for the test.
func TestNetNodeImageRunsIptables(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test uses chroot and network namespaces and needs root (see docs/development.md)")
	}
	root, err := filepath.Abs("../..")
	g.Expect(err).NotTo(HaveOccurred())
	t.Chdir(root) // run builds packages by their path relative to the repository root

	var digests []string
	rootfs, kept := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	for i, d := range []string{t.TempDir(), t.TempDir()} {
		t.Setenv("YONDER_CACHE_DIR", t.TempDir()) // each build its own: the kept archive would make it trivially the same
		o := buildOptions{Out: d, Registry: "ghcr.io/yonder-dev", Tag: "test", Only: []string{"yonder-net-node"}}
		if i == 1 {
			o.Binaries = kept // the second build also keeps its binary (-binaries)
		}
		imgs, err := build(o)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(imgs).To(HaveLen(1))
		digests = append(digests, imgs[0].digest.String())
		if i == 0 {
			g.Expect(unpack(filepath.Join(d, "yonder-net-node.oci.tar"), rootfs)).To(Succeed())
			checkIptables(t, rootfs)
		}
	}
	g.Expect(digests[1]).To(Equal(digests[0]), "the image is reproducible")
	inImage, err := os.ReadFile(filepath.Join(rootfs, "yonder-net-node"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(kept, "yonder-net-node"))).To(Equal(inImage), "-binaries keeps the very binary the image carries, under the image's name")
	entries, err := os.ReadDir(kept)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "only the selected image's binary is kept")
	_, err = build(buildOptions{Out: t.TempDir(), Registry: "r", Tag: "t", Only: []string{"nope"}})
	g.Expect(err).To(MatchError(ContainSubstring(`"nope"`)))
}

func checkIptables(t *testing.T, rootfs string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(filepath.Join(rootfs, "yonder-net-node")).To(BeARegularFile())
	// The daemon runs "iptables" through PATH: the image config's PATH, as the container runtime sets it.
	chroot := func(netns string, args ...string) (string, error) {
		argv := append([]string{"chroot", rootfs}, args...)
		if netns != "" {
			argv = append([]string{"nsenter", "--net=/run/netns/" + netns}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := chroot("", "iptables", "--version")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(MatchRegexp(`^iptables v1\.\d+\.\d+ \(nf_tables\)`))
	out, err = chroot("", "iptables-legacy", "--version")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("(legacy)"))

	ns := fmt.Sprintf("yimg-%d", os.Getpid())
	if o, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("failed to create network namespace %s: %v: %s", ns, err, o)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// kernel.Clamp's rules, with its flags (-w: the xtables lock in /run).
	for _, r := range [][]string{
		{"-w", "-t", "filter", "-I", "INPUT", "-p", "udp", "--dport", "4790", "-i", "yonder-wg", "-j", "ACCEPT"},
		{"-w", "-t", "filter", "-A", "INPUT", "-p", "udp", "--dport", "4790", "-j", "DROP"},
		{"-w", "-t", "mangle", "-A", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"},
		{"-w", "-t", "mangle", "-C", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"},
	} {
		out, err := chroot(ns, append([]string{"iptables"}, r...)...)
		g.Expect(err).NotTo(HaveOccurred(), "iptables %v: %s", r, out)
	}
	// The underlay VXLAN filter (kernel.filterVXLAN): one iptables-restore replaces the chain.
	restore := exec.Command("nsenter", "--net=/run/netns/"+ns, "chroot", rootfs, "iptables-restore", "-w", "--noflush")
	restore.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	restore.Stdin = strings.NewReader("*filter\n:YONDER-VXLAN - [0:0]\n-F YONDER-VXLAN\n-A YONDER-VXLAN -s 192.0.2.1/32 -j RETURN\n-A YONDER-VXLAN -j DROP\nCOMMIT\n")
	rout, err := restore.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(rout))
	out, err = chroot(ns, "iptables", "-w", "-t", "filter", "-S", "YONDER-VXLAN")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("-N YONDER-VXLAN\n-A YONDER-VXLAN -s 192.0.2.1/32 -j RETURN\n-A YONDER-VXLAN -j DROP\n"))
	out, err = chroot(ns, "iptables", "-w", "-t", "filter", "-S", "INPUT")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("-P INPUT ACCEPT\n" +
		"-A INPUT -i yonder-wg -p udp -m udp --dport 4790 -j ACCEPT\n" +
		"-A INPUT -p udp -m udp --dport 4790 -j DROP\n"))
	out, err = chroot(ns, "iptables-save", "-t", "mangle")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("-A FORWARD -p tcp -m tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu"))
	// The rules live in the test's namespace, not on the host.
	host, err := exec.Command("iptables", "-w", "-t", "mangle", "-S", "FORWARD").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(host))
	g.Expect(string(host)).NotTo(ContainSubstring("--dport 4790"))
}

// unpack extracts the image of the archive into dir (its layers flattened) with tar.
func unpack(archive, dir string) error {
	imgs, done, err := ociimage.ReadArchive(archive)
	if err != nil {
		return err
	}
	defer done()
	if len(imgs) != 1 {
		return fmt.Errorf("%s holds %d images, want 1", archive, len(imgs))
	}
	for _, img := range imgs {
		rc := mutate.Extract(img)
		cmd := exec.Command("tar", "-C", dir, "-xf", "-")
		cmd.Stdin = rc
		out, err := cmd.CombinedOutput()
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("failed to unpack %s: %s: %w", archive, out, err)
		}
	}
	return nil
}

// The last archive of each reference is kept: a build from the same inputs takes it (a hard link of the
// kept file, nothing written anew), another input builds and replaces it, and going back builds again
// the same digest.
func TestAnImageIsBuiltAgainOnlyWhenWhatItIsMadeFromChanged(t *testing.T) {
	g := NewWithT(t)
	cache := t.TempDir()
	t.Setenv("YONDER_CACHE_DIR", cache)
	spec := func(content string) ociimage.Image {
		return ociimage.Image{Files: []ociimage.File{{Path: "hello", Content: []byte(content)}}, Entrypoint: []string{"/hello"}}
	}
	build := func(content string) (built, string) {
		o := buildOptions{Out: t.TempDir(), Registry: "example.test/yonder", Tag: "t"}
		b, err := write(o, "hello", o.Tag, spec(content))
		g.Expect(err).NotTo(HaveOccurred())
		archive := filepath.Join(o.Out, "hello.oci.tar")
		g.Expect(archive).To(BeARegularFile())
		return b, archive
	}
	kept := func() os.FileInfo {
		m, err := filepath.Glob(filepath.Join(cache, "images", "*", "image.oci.tar"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m).To(HaveLen(1), "one slot per reference")
		fi, err := os.Stat(m[0])
		g.Expect(err).NotTo(HaveOccurred())
		return fi
	}
	sameFile := func(archive string, kept os.FileInfo) bool {
		fi, err := os.Stat(archive)
		g.Expect(err).NotTo(HaveOccurred())
		return os.SameFile(fi, kept)
	}

	first, _ := build("a")
	again, archive := build("a")
	g.Expect(again.digest).To(Equal(first.digest))
	g.Expect(sameFile(archive, kept())).To(BeTrue(), "the same inputs take the kept archive")

	other, archive := build("b")
	g.Expect(other.digest).NotTo(Equal(first.digest))
	g.Expect(sameFile(archive, kept())).To(BeTrue(), "the new archive is the one kept now")

	back, archive := build("a")
	g.Expect(back.digest).To(Equal(first.digest), "built again, the same image")
	imgs, done, err := ociimage.ReadArchive(archive)
	g.Expect(err).NotTo(HaveOccurred())
	defer done()
	g.Expect(imgs).To(HaveLen(1))
	for _, img := range imgs {
		d, err := img.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d).To(Equal(first.digest), "the archive holds the image its digest names")
	}
}
