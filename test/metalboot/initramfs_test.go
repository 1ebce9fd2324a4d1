package metalboot

import (
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// The initramfs is read back by a real cpio implementation (busybox's, which the boot image itself carries):
// the same tree, modes and symlinks come out.
func TestInitramfsUnpacksToTheSameTree(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "bin"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "lib", "modules"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "init"), []byte("#!/bin/busybox sh\necho hi\n"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "lib", "modules", "order"), []byte("virtio\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "bin", "odd"), []byte("abc"), 0o600)).To(Succeed()) // 3 bytes: data padding
	g.Expect(os.Symlink("busybox", filepath.Join(root, "bin", "sh"))).To(Succeed())
	dst := filepath.Join(t.TempDir(), "initrd")
	g.Expect(writeInitramfs(root, dst)).To(Succeed())

	f, err := os.Open(dst)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	g.Expect(err).NotTo(HaveOccurred())
	out := t.TempDir()
	cpio := exec.Command("busybox", "cpio", "-i", "-d", "-m")
	cpio.Dir, cpio.Stdin = out, zr
	b, err := cpio.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(b))

	g.Expect(os.ReadFile(filepath.Join(out, "init"))).To(Equal([]byte("#!/bin/busybox sh\necho hi\n")))
	g.Expect(os.ReadFile(filepath.Join(out, "bin", "odd"))).To(Equal([]byte("abc")))
	g.Expect(os.ReadFile(filepath.Join(out, "lib", "modules", "order"))).To(Equal([]byte("virtio\n")))
	st, err := os.Stat(filepath.Join(out, "init"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	g.Expect(os.Readlink(filepath.Join(out, "bin", "sh"))).To(Equal("busybox"))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")) // pkg/atomicfile's temporary names
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no temporary file stays beside the initramfs")
}
