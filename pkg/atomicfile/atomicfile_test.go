package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/atomicfile"
)

// entries lists dir's names: what a reader of the directory sees.
func entries(g Gomega, dir string) []string {
	es, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteIfChangedWritesOnlyWhatDiffers(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "kubelet.conf")

	changed, err := atomicfile.WriteIfChanged(p, []byte("a"), 0o600)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue(), "a new file")
	st, err := os.Stat(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	changed, err = atomicfile.WriteIfChanged(p, []byte("a"), 0o600)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "same content and mode")

	changed, err = atomicfile.WriteIfChanged(p, []byte("a"), 0o644)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue(), "the mode differs")
	st, err = os.Stat(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o644)))

	changed, err = atomicfile.WriteIfChanged(p, []byte("b"), 0o644)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue(), "the content differs")
	g.Expect(os.ReadFile(p)).To(Equal([]byte("b")))
	g.Expect(entries(g, dir)).To(ConsistOf("kubelet.conf"), "no temporary file left")
}

// The temporary file is private while it is written, whatever mode the target gets.
func TestTheTemporaryFileIsPrivateUntilCommitted(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	f, err := atomicfile.Create(p)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("secret")
	g.Expect(err).NotTo(HaveOccurred())
	st, err := os.Stat(f.Name())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(filepath.Dir(f.Name())).To(Equal(dir), "beside the target: the rename stays on one filesystem")
	_, err = os.Stat(p)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the target appears only when complete")
	g.Expect(f.Commit(0o644)).To(Succeed())
	g.Expect(os.ReadFile(p)).To(Equal([]byte("secret")))
	f.Abort() // after Commit: nothing
	g.Expect(entries(g, dir)).To(ConsistOf("token"))
	g.Expect(f.Commit(0o644)).To(MatchError(ContainSubstring("already committed")))
}

func TestAbortLeavesTheTargetAsItWas(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "unit")
	g.Expect(os.WriteFile(p, []byte("old"), 0o644)).To(Succeed())
	f, err := atomicfile.Create(p)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("half")
	g.Expect(err).NotTo(HaveOccurred())
	f.Abort()
	g.Expect(os.ReadFile(p)).To(Equal([]byte("old")))
	g.Expect(entries(g, dir)).To(ConsistOf("unit"))
}

// A rename that cannot happen (the target is a non-empty directory) fails with the target's name and
// leaves neither a temporary file nor a changed target.
func TestAFailedCommitRemovesTheTemporaryFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "busy")
	g.Expect(os.MkdirAll(filepath.Join(p, "inside"), 0o755)).To(Succeed())
	err := atomicfile.Write(p, []byte("x"), 0o644)
	g.Expect(err).To(MatchError(ContainSubstring("failed to write " + p)))
	g.Expect(entries(g, dir)).To(ConsistOf("busy"))
	g.Expect(entries(g, p)).To(ConsistOf("inside"))
}

func TestCreateNeedsTheDirectory(t *testing.T) {
	g := NewWithT(t)
	_, err := atomicfile.Create(filepath.Join(t.TempDir(), "missing", "file"))
	g.Expect(err).To(MatchError(ContainSubstring("failed to write")))
}
