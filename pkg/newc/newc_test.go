package newc_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/newc"
)

// An archive unpacks with busybox's cpio (what test-bins installs) to exactly what was added: names,
// contents, modes and links, whatever the padding. (That the kernel unpacks a second archive after a
// first one is the bare-metal e2e's: its hosts boot the image and the boot server's key archive.)
func TestArchiveUnpacksWithCpio(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	w := newc.NewWriter(&b)
	g.Expect(w.Dir("etc", 0o755)).To(Succeed())
	g.Expect(w.Dir("etc/yonder", 0o700)).To(Succeed())
	g.Expect(w.File("etc/yonder/a", 0o600, []byte("odd length"))).To(Succeed())
	g.Expect(w.File("etc/yonder/empty", 0o644, nil)).To(Succeed())
	g.Expect(w.Symlink("etc/link", "yonder/a")).To(Succeed())
	g.Expect(w.Close()).To(Succeed())
	g.Expect(b.Len() % 4).To(BeZero())
	g.Expect(w.File("bad\x00name", 0o644, nil)).To(MatchError(ContainSubstring("not allowed")))

	dir := t.TempDir()
	cmd := exec.Command("/bin/busybox", "cpio", "-i", "-d", "-H", "newc")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(b.Bytes())
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	got, err := os.ReadFile(filepath.Join(dir, "etc/yonder/a"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("odd length"))
	fi, err := os.Stat(filepath.Join(dir, "etc/yonder/a"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	fi, err = os.Stat(filepath.Join(dir, "etc/yonder/empty"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Size()).To(BeZero())
	target, err := os.Readlink(filepath.Join(dir, "etc/link"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(target).To(Equal("yonder/a"))
}
