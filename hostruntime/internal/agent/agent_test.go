package agent

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestInRootResolvesAbsoluteSymlinksInsideTheMachine(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	pki := filepath.Join(root, "var/lib/kubelet/pki")
	g.Expect(os.MkdirAll(pki, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(pki, "kubelet-client-2026.pem"), []byte("pem"), 0o600)).To(Succeed())
	g.Expect(os.Symlink("/var/lib/kubelet/pki/kubelet-client-2026.pem", filepath.Join(pki, "kubelet-client-current.pem"))).To(Succeed())
	g.Expect(inRoot(root, "/var/lib/kubelet/pki/kubelet-client-current.pem")).To(Equal(filepath.Join(pki, "kubelet-client-2026.pem")))
	g.Expect(inRoot(root, "/etc/none")).To(Equal(filepath.Join(root, "etc/none")))
}

func TestWriterLeavesEqualFilesUntouched(t *testing.T) {
	g := NewWithT(t)
	w := &writer{root: t.TempDir()}
	w.file("/etc/a.conf", "x\n", 0o644)
	w.symlink("/etc/a.conf", "/etc/b.conf")
	g.Expect(w.err).NotTo(HaveOccurred())
	g.Expect(w.changed).To(Equal([]string{"/etc/a.conf", "/etc/b.conf"}))
	w2 := &writer{root: w.root}
	w2.file("/etc/a.conf", "x\n", 0o644)
	w2.symlink("/etc/a.conf", "/etc/b.conf")
	g.Expect(w2.changed).To(BeEmpty())
	w2.file("/etc/a.conf", "x\n", 0o600)
	g.Expect(w2.changed).To(Equal([]string{"/etc/a.conf"}), "a mode change is a change")
}

func TestOptionsDefaultsAndNames(t *testing.T) {
	g := NewWithT(t)
	o := Options{}
	g.Expect(o.defaults("edge.example.com")).To(Succeed())
	g.Expect(o.MachineName).To(Equal("yonder-edge-example-com"))
	g.Expect(o.CgroupName).To(Equal(o.MachineName))
	g.Expect(o.rootfsDir()).To(Equal("/var/lib/yonder/machines/yonder-edge-example-com"))
	bad := Options{MachineName: "Bad_Name"}
	g.Expect(bad.defaults("x")).To(MatchError(ContainSubstring("machine name")))
}

func TestPhaseErrorSaysPhaseWhyAndWhatToDo(t *testing.T) {
	g := NewWithT(t)
	err := &PhaseError{Phase: "join", Err: withHint(os.ErrDeadlineExceeded, "check the token"), Hint: "check the token"}
	g.Expect(err.Error()).To(Equal("phase join failed: i/o timeout; what to do: check the token"))
}
