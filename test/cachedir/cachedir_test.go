package cachedir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A second build of the same entry waits for the first (the lock is per open file, so two callers in one
// process exclude each other as two processes do), and gives up when its context ends.
func TestBuildLockWaitsForTheHolder(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "key.lock")
	unlock, err := Lock(context.Background(), path)
	g.Expect(err).NotTo(HaveOccurred())

	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Lock(short, path)
	g.Expect(err).To(MatchError(ContainSubstring("waiting for another build holding")))

	got := make(chan error, 1)
	go func() {
		second, err := Lock(context.Background(), path)
		if err == nil {
			second()
		}
		got <- err
	}()
	g.Consistently(got, time.Second).ShouldNot(Receive())
	unlock()
	g.Eventually(got, 10*time.Second).Should(Receive(BeNil()))
}

// Place links or copies, with the source's permissions, and replaces the destination by a rename: a hard
// link of the old destination elsewhere keeps its content.
func TestPlaceReplacesWithoutWritingThrough(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	src, dst, other := filepath.Join(dir, "src"), filepath.Join(dir, "dst"), filepath.Join(dir, "other")
	g.Expect(os.WriteFile(src, []byte("new"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(other, []byte("old"), 0o644)).To(Succeed())
	g.Expect(os.Link(other, dst)).To(Succeed())

	g.Expect(Place(src, dst, true)).To(Succeed())
	s, err := os.Stat(src)
	g.Expect(err).NotTo(HaveOccurred())
	d, err := os.Stat(dst)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(s, d)).To(BeTrue(), "linked")
	g.Expect(os.ReadFile(other)).To(Equal([]byte("old")), "the old destination's other link is untouched")

	copied := filepath.Join(dir, "copied")
	g.Expect(Place(src, copied, false)).To(Succeed())
	c, err := os.Stat(copied)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(s, c)).To(BeFalse(), "copied")
	g.Expect(c.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	g.Expect(os.ReadFile(copied)).To(Equal([]byte("new")))

	g.Expect(Place(filepath.Join(dir, "missing"), filepath.Join(dir, "x"), true)).NotTo(Succeed())
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no temporary file left")
}

// A second Place of the same cached file (a second `make images` over the same out/) leaves nothing
// behind: rename(2) of one hard link onto another of the same file does nothing, which once left the
// temporary link beside every archive.
func TestPlaceAgainLeavesNoTemporaryLink(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	g.Expect(os.WriteFile(src, []byte("kept"), 0o644)).To(Succeed())
	for range 2 {
		g.Expect(Place(src, dst, true)).To(Succeed())
	}
	s, err := os.Stat(src)
	g.Expect(err).NotTo(HaveOccurred())
	d, err := os.Stat(dst)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(s, d)).To(BeTrue())
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no temporary link left")
}
