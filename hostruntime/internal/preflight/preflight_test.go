package preflight

import (
	"net"
	"os"
	"os/exec"
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

// The bridge netfilter check: its sysctls there is OK; not loaded but listed in the kernel's module index
// with modprobe installed is OK (the host phase loads it); not listed is a warning with the fix, never a
// failure (the host phase's own modprobe then says why).
func TestBridgeNetfilterIsThereOrLoadable(t *testing.T) {
	g := NewWithT(t)
	check := func(in Input) Check {
		in.BridgeNetfilter = true
		for _, c := range Run(in).Checks {
			if c.Name == "bridge netfilter" {
				return c
			}
		}
		t.Fatal("no bridge netfilter check")
		return Check{}
	}
	loaded := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(loaded, "net/bridge"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(loaded, "net/bridge/bridge-nf-call-iptables"), []byte("1\n"), 0o644)).To(Succeed())
	g.Expect(check(Input{ProcSys: loaded}).Severity).To(Equal(OK))

	notLoaded, modules := t.TempDir(), t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(modules, "modules.dep"), []byte("kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz\n"), 0o644)).To(Succeed())
	sh, err := exec.LookPath("sh") // any executable stands for modprobe: the check only looks for it
	g.Expect(err).NotTo(HaveOccurred())
	c := check(Input{ProcSys: notLoaded, ModulesDir: modules, Modprobe: sh})
	g.Expect(c.Severity).To(Equal(OK), c.Message)
	g.Expect(c.Message).To(ContainSubstring("the host phase loads it"))
	c = check(Input{ProcSys: notLoaded, ModulesDir: modules, Modprobe: "no-such-modprobe-yonder"})
	g.Expect(c.Severity).To(Equal(Warn), c.Message)
	g.Expect(c.Fix).To(ContainSubstring("install kmod"))

	g.Expect(os.WriteFile(filepath.Join(modules, "modules.dep"), []byte("kernel/net/bridge/bridge.ko.xz:\n"), 0o644)).To(Succeed())
	c = check(Input{ProcSys: notLoaded, ModulesDir: modules, Modprobe: sh})
	g.Expect(c.Severity).To(Equal(Warn), c.Message)
	g.Expect(c.Fix).To(ContainSubstring("CONFIG_BRIDGE_NETFILTER"))
}
