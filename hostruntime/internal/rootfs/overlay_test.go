package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

// tree is a minimal rootfs tree: systemd as init and one file.
func tree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(dir, "lib", "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib", "systemd", "systemd"), []byte("init"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc-hostname"), []byte("tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The machine writes into its own layer only: the shared tree stays as it was, the machine's changes
// survive an unmount (a host reboot), and Discard removes the machine without touching the tree.
func TestMachineOverlayKeepsTheTreeUntouched(t *testing.T) {
	g := NewWithT(t)
	lower := tree(t)
	m := NewMachine(filepath.Join(t.TempDir(), "machines", "node"))
	t.Cleanup(func() { _ = unix.Unmount(m.Dir, unix.MNT_DETACH) })

	g.Expect(m.Overlaid()).To(BeFalse())
	g.Expect(m.Mount(lower)).To(Succeed())
	g.Expect(m.Overlaid()).To(BeTrue())
	g.Expect(Init(m.Dir)).To(Equal("/lib/systemd/systemd"))
	g.Expect(m.Mount(lower)).To(Succeed(), "mounting a mounted root does nothing")
	g.Expect(os.WriteFile(filepath.Join(m.Dir, "etc-hostname"), []byte("node\n"), 0o644)).To(Succeed())
	g.Expect(os.Remove(filepath.Join(m.Dir, "lib", "systemd", "systemd"))).To(Succeed())
	g.Expect(os.ReadFile(filepath.Join(lower, "etc-hostname"))).To(Equal([]byte("tree\n")))
	g.Expect(filepath.Join(lower, "lib", "systemd", "systemd")).To(BeAnExistingFile())

	// After a reboot the mount is gone and the same machine's layer comes back.
	g.Expect(os.WriteFile(filepath.Join(m.Dir, "lib", "systemd", "systemd"), []byte("init"), 0o755)).To(Succeed())
	g.Expect(unix.Unmount(m.Dir, 0)).To(Succeed())
	g.Expect(Init(m.Dir)).To(BeEmpty())
	g.Expect(m.Overlaid()).To(BeTrue())
	g.Expect(m.Mount(lower)).To(Succeed())
	g.Expect(os.ReadFile(filepath.Join(m.Dir, "etc-hostname"))).To(Equal([]byte("node\n")))

	g.Expect(m.Discard()).To(Succeed())
	g.Expect(m.Dir).NotTo(BeAnExistingFile())
	g.Expect(m.Data).NotTo(BeAnExistingFile())
	g.Expect(os.ReadFile(filepath.Join(lower, "etc-hostname"))).To(Equal([]byte("tree\n")))
	g.Expect(m.Discard()).To(Succeed(), "discarding nothing is not an error")
}

// Where the machine's layer would sit on an overlay itself (a host that is a container), the kernel
// refuses the mount: the probe says so with ErrOverlayUnsupported and leaves nothing behind, and Mount
// leaves no layer that would make the machine look overlaid.
func TestOverlayOnAnOverlayIsUnsupported(t *testing.T) {
	g := NewWithT(t)
	lower := tree(t)
	g.Expect(OverlaySupported(filepath.Dir(lower))).To(Succeed())
	g.Expect(os.ReadDir(filepath.Dir(lower))).To(HaveLen(1), "the probe left nothing")

	outer := NewMachine(filepath.Join(t.TempDir(), "outer"))
	g.Expect(outer.Mount(lower)).To(Succeed())
	t.Cleanup(func() { _ = outer.Discard() })
	machines := filepath.Join(outer.Dir, "var", "lib", "yonder", "machines")
	g.Expect(os.MkdirAll(machines, 0o700)).To(Succeed())

	err := OverlaySupported(machines)
	g.Expect(errors.Is(err, ErrOverlayUnsupported)).To(BeTrue(), "got %v", err)
	g.Expect(os.ReadDir(machines)).To(BeEmpty(), "the probe left nothing")
	m := NewMachine(filepath.Join(machines, "node"))
	g.Expect(errors.Is(m.Mount(lower), ErrOverlayUnsupported)).To(BeTrue())
	g.Expect(m.Overlaid()).To(BeFalse())
}

//nolint:dupword // mountinfo names the overlay filesystem type and its source "overlay"
func TestOverlayLowerDirsReadsTheOverlaysBelowADirectory(t *testing.T) {
	g := NewWithT(t)
	info := `22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
95 22 0:50 / /var/lib/yonder/machines/node rw,relatime shared:50 - overlay overlay rw,lowerdir=/var/lib/yonder/cache/rootfs/trees/ab12,upperdir=/var/lib/yonder/machines/node.data/upper,workdir=/var/lib/yonder/machines/node.data/work
96 22 0:51 / /var/lib/yonder/machines/node-green rw,relatime shared:51 - overlay overlay rw,lowerdir=/a:/b,upperdir=/u,workdir=/w
97 22 0:52 / /var/lib/docker/x rw,relatime shared:52 - overlay overlay rw,lowerdir=/other,upperdir=/u2,workdir=/w2
98 95 0:53 / /var/lib/yonder/machines/node/proc rw - proc proc rw
`
	g.Expect(OverlayLowerDirs(info, "/var/lib/yonder/machines")).To(Equal([]string{"/var/lib/yonder/cache/rootfs/trees/ab12", "/a", "/b"}))
	g.Expect(OverlayLowerDirs(info, "/var/lib/yonder/machines/node")).To(BeEmpty())
}
