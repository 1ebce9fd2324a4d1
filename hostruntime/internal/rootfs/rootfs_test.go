package rootfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestHostMirror(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(HostMirror(dir)).To(Equal(DefaultMirror))
	g.Expect(os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(
		"Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\nURIs: http://mirror.example/debian\nSuites: bookworm\n"), 0o644)).To(Succeed())
	g.Expect(HostMirror(dir)).To(Equal("http://mirror.example/debian"))
	g.Expect(os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), nil, 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "sources.list"), []byte("deb [arch=amd64] http://old.example/debian bookworm main\n"), 0o644)).To(Succeed())
	g.Expect(HostMirror(dir)).To(Equal("http://old.example/debian"))
}

func TestExtractIsAtomicAndRequiresSystemd(t *testing.T) {
	g := NewWithT(t)
	src := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(src, "lib", "systemd"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(src, "lib", "systemd", "systemd"), []byte("init"), 0o755)).To(Succeed())
	archive := filepath.Join(t.TempDir(), "rootfs.tar.gz")
	out, err := exec.Command("tar", "-C", src, "-czf", archive, ".").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	dst := filepath.Join(t.TempDir(), "machine")
	g.Expect(Extract(context.Background(), archive, dst)).To(Succeed())
	g.Expect(Init(dst)).To(Equal("/lib/systemd/systemd"))
	g.Expect(dst + ".partial").NotTo(BeAnExistingFile())

	empty := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(empty, "x"), nil, 0o644)).To(Succeed())
	bad := filepath.Join(t.TempDir(), "bad.tar")
	out, err = exec.Command("tar", "-C", empty, "-cf", bad, ".").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	dst2 := filepath.Join(t.TempDir(), "machine")
	g.Expect(Extract(context.Background(), bad, dst2)).To(MatchError(ContainSubstring("has no systemd")))
	g.Expect(dst2).NotTo(BeAnExistingFile())
}

// TestPackZstdRoundTripAndFailure: the debootstrap cache archive extracts to the same tree, and a tar that
// fails is reported as tar's failure (a shell pipeline would have reported zstd's success).
func TestPackZstdRoundTripAndFailure(t *testing.T) {
	g := NewWithT(t)
	src := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(src, "lib", "systemd"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(src, "lib", "systemd", "systemd"), []byte("init"), 0o755)).To(Succeed())
	archive := filepath.Join(t.TempDir(), "rootfs.tar.zst")
	g.Expect(packZstd(context.Background(), src, archive)).To(Succeed())
	dst := filepath.Join(t.TempDir(), "machine")
	g.Expect(Extract(context.Background(), archive, dst)).To(Succeed())
	g.Expect(os.ReadFile(filepath.Join(dst, "lib", "systemd", "systemd"))).To(Equal([]byte("init")))

	err := packZstd(context.Background(), filepath.Join(src, "missing"), filepath.Join(t.TempDir(), "x.tar.zst"))
	g.Expect(err).To(MatchError(ContainSubstring("tar failed")))
}
