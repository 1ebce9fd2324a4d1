package preflight

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRunReportsEveryProblemWithAFix(t *testing.T) {
	g := NewWithT(t)
	l, err := net.Listen("tcp", ":0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	port := l.Addr().(*net.TCPAddr).Port
	mi := filepath.Join(t.TempDir(), "mountinfo")
	g.Expect(os.WriteFile(mi, []byte("1 0 0:1 / / rw - ext4 /dev/vda rw\n"), 0o644)).To(Succeed())
	rep := Run(Input{StateDir: t.TempDir(), MinFreeBytes: 1 << 62, Ports: []int{port}, Tools: []string{"no-such-tool-yonder"}, MountInfo: mi})
	failed := map[string]string{}
	for _, c := range rep.Failed() {
		failed[c.Name] = c.Fix
	}
	g.Expect(failed).To(HaveKey("port " + strconv.Itoa(port)))
	g.Expect(failed).To(HaveKey("disk"))
	g.Expect(failed).To(HaveKey("cgroups"))
	g.Expect(failed).To(HaveKey("tool no-such-tool-yonder"))
	err = rep.Err()
	g.Expect(err).To(HaveOccurred())
	for name, fix := range failed {
		g.Expect(fix).NotTo(BeEmpty(), name)
		// The error the agent reports names every failed check with its fix.
		g.Expect(err.Error()).To(ContainSubstring(name+": "), name)
		g.Expect(err.Error()).To(ContainSubstring("(fix: "+fix+")"), name)
	}
}

func TestKernelVersion(t *testing.T) {
	g := NewWithT(t)
	maj, minor := kernelVersion("6.18.44-fc-v669")
	g.Expect([]int{maj, minor}).To(Equal([]int{6, 18}))
	maj, minor = kernelVersion("4.19rc1")
	g.Expect([]int{maj, minor}).To(Equal([]int{4, 19}))
}
