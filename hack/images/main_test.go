package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The node daemon's image carries a working iptables: the image is built twice with the same digest, its
// layer is unpacked and the daemon's own commands (iptables through PATH, the rules of engine.Clamp) run
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
	for _, d := range []string{t.TempDir(), t.TempDir()} {
		g.Expect(run(d, "ghcr.io/yonder-dev", "test", []string{"yonder-net-node"})).To(Succeed())
		digest, err := manifestDigest(filepath.Join(d, "yonder-net-node.oci.tar"))
		g.Expect(err).NotTo(HaveOccurred())
		digests = append(digests, digest)
		if len(digests) == 1 {
			rootfs := t.TempDir()
			g.Expect(unpackLayer(filepath.Join(d, "yonder-net-node.oci.tar"), rootfs)).To(Succeed())
			checkIptables(t, rootfs)
		}
	}
	g.Expect(digests[1]).To(Equal(digests[0]), "the image is reproducible")
	g.Expect(run(t.TempDir(), "r", "t", []string{"nope"})).To(MatchError(ContainSubstring(`"nope"`)))
}

func checkIptables(t *testing.T, rootfs string) {
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
	// engine.Clamp's rules, with its flags (-w: the xtables lock in /run).
	for _, r := range [][]string{
		{"-w", "-t", "filter", "-I", "INPUT", "-p", "udp", "--dport", "4790", "-i", "yonder-wg", "-j", "ACCEPT"},
		{"-w", "-t", "filter", "-A", "INPUT", "-p", "udp", "--dport", "4790", "-j", "DROP"},
		{"-w", "-t", "mangle", "-A", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"},
		{"-w", "-t", "mangle", "-C", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"},
	} {
		out, err := chroot(ns, append([]string{"iptables"}, r...)...)
		g.Expect(err).NotTo(HaveOccurred(), "iptables %v: %s", r, out)
	}
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

// unpackLayer extracts the single layer of the OCI archive into dir.
func unpackLayer(archive, dir string) error {
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if b, err := io.ReadAll(tr); err != nil {
			return err
		} else if h.Typeflag == tar.TypeReg {
			blobs[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
	var idx struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		return fmt.Errorf("failed to read index.json: %v", err)
	}
	blob := func(d string) []byte { return blobs["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	var m struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blob(idx.Manifests[0].Digest), &m); err != nil || len(m.Layers) != 1 {
		return fmt.Errorf("failed to read the manifest: %v", err)
	}
	lr := tar.NewReader(bytes.NewReader(blob(m.Layers[0].Digest)))
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm()|0o700)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(lr); err == nil {
				err = os.WriteFile(p, data, os.FileMode(h.Mode).Perm())
			}
		default:
			err = fmt.Errorf("unexpected entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}
