package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
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

// GPU handling end to end inside the agent: a synthetic sysfs/dev tree with one NVIDIA and one AMD GPU
// gives Node labels and device binds; mode NVIDIA keeps only NVIDIA's nodes; mode AMD without an AMD GPU fails.
func TestGPUDetectionBecomesLabelsAndDeviceBinds(t *testing.T) {
	g := NewWithT(t)
	sys, dev := t.TempDir(), t.TempDir()
	for addr, vendor := range map[string]string{"0000:01:00.0": "0x10de", "0000:02:00.0": "0x1002"} {
		d := filepath.Join(sys, "bus/pci/devices", addr)
		g.Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(d, "class"), []byte("0x030000\n"), 0o644)).To(Succeed())
	}
	for _, n := range []string{"nvidia0", "nvidiactl", "kfd"} {
		g.Expect(os.WriteFile(filepath.Join(dev, n), nil, 0o600)).To(Succeed())
	}
	g.Expect(os.MkdirAll(filepath.Join(dev, "dri"), 0o755)).To(Succeed())

	newRun := func(mode agentv1.GPUMode) *run {
		o := &Options{SysRoot: sys, DevRoot: dev, MachineName: "m"}
		g.Expect(o.defaults("n")).To(Succeed())
		return &run{o: o, cfg: &agentv1.AgentConfig{GPU: agentv1.GPU{Mode: mode}}, st: &state.State{}}
	}
	r := newRun(agentv1.GPUModeAuto)
	res, err := r.detectGPU()
	g.Expect(err).NotTo(HaveOccurred())
	r.gpu = res
	g.Expect(res.Labels()).To(HaveKeyWithValue("yonder.dev/gpu.vendor", "mixed"))
	g.Expect(r.nspawnConfig().DeviceBinds).To(ConsistOf(
		filepath.Join(dev, "dri")+":/dev/dri", filepath.Join(dev, "kfd")+":/dev/kfd",
		filepath.Join(dev, "nvidia0")+":/dev/nvidia0", filepath.Join(dev, "nvidiactl")+":/dev/nvidiactl"))

	r = newRun(agentv1.GPUModeNVIDIA)
	res, err = r.detectGPU()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.DeviceNodes).To(Equal([]string{"dri", "nvidia0", "nvidiactl"}))
	g.Expect(res.Labels()).To(HaveKeyWithValue("yonder.dev/gpu.vendor", "nvidia"))

	r = newRun(agentv1.GPUModeNone)
	res, err = r.detectGPU()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Devices).To(BeEmpty())

	g.Expect(os.RemoveAll(filepath.Join(sys, "bus/pci/devices/0000:02:00.0"))).To(Succeed())
	_, err = newRun(agentv1.GPUModeAMD).detectGPU()
	g.Expect(err).To(MatchError(ContainSubstring("no AMD GPU")))
}

// On hosts with journald the agent's log also goes to the journal (native protocol), and always to
// <state>/log/agent.log.
func TestLogsGoToJournaldWhenPresentAndToAFile(t *testing.T) {
	g := NewWithT(t)
	sock := filepath.Join(t.TempDir(), "journal.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	var stderr bytes.Buffer
	o := &Options{StateDir: t.TempDir(), JournalSocket: sock, Log: &stderr}
	g.Expect(o.defaults("n")).To(Succeed())
	log, done := o.logger()
	log.Info("Running phase", "phase", "rootfs")
	done()
	buf := make([]byte, 4096)
	n, err := l.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf[:n])).To(HavePrefix("SYSLOG_IDENTIFIER=yonder-agent\nMESSAGE="))
	g.Expect(string(buf[:n])).To(ContainSubstring("phase=rootfs"))
	g.Expect(stderr.String()).To(ContainSubstring("phase=rootfs"))
	data, err := os.ReadFile(filepath.Join(o.StateDir, "log", "agent.log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("phase=rootfs"))
}

// Reset must detach only what is strictly below the directory it names: the directory itself may be the
// operator's filesystem, and a sibling sharing its prefix (/var/lib/yonder2) is not below it.
func TestMountsBelowSkipsTheDirectoryItselfAndSiblings(t *testing.T) {
	const mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:2 / /var/lib/yonder rw,relatime shared:2 - ext4 /dev/sdb1 rw
31 30 0:40 / /var/lib/yonder/machines/m1/proc rw - proc proc rw
32 30 0:41 / /var/lib/yonder/machines/m1 rw - tmpfs tmpfs rw
33 30 0:42 / /var/lib/yonder/machines/m1 rw - tmpfs tmpfs rw
34 22 0:43 / /var/lib/yonder2/x rw - tmpfs tmpfs rw
35 30 0:44 / /var/lib/yonder/machines/with\040space rw - tmpfs tmpfs rw
36 22 8:3 / /var/lib/yonder/machines rw - ext4 /dev/sdc1 rw
short line
`
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"/var/lib/yonder/machines", []string{"/var/lib/yonder/machines/with space", "/var/lib/yonder/machines/m1/proc",
			"/var/lib/yonder/machines/m1", "/var/lib/yonder/machines/m1"}},
		{"/var/lib/yonder/machines/", []string{"/var/lib/yonder/machines/with space", "/var/lib/yonder/machines/m1/proc",
			"/var/lib/yonder/machines/m1", "/var/lib/yonder/machines/m1"}},
		{"/var/lib/yonder/machines/m1", []string{"/var/lib/yonder/machines/m1/proc"}},
		{"/var/lib/yonder/machines/m1/proc", nil},
		{"/var/lib/yon", nil},
		{"/", []string{"/var/lib/yonder/machines/with space", "/var/lib/yonder/machines/m1/proc",
			"/var/lib/yonder/machines/m1", "/var/lib/yonder/machines/m1", "/var/lib/yonder/machines", "/var/lib/yonder2/x", "/var/lib/yonder"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(mountsBelow(strings.NewReader(mountinfo), tc.dir)).To(Equal(tc.want))
		})
	}
}

// A host whose state directory is its own filesystem: reset detaches what the machine left below
// machines/ and keeps the operator's mounts (the state directory and machines/ themselves).
func TestResetKeepsTheOperatorsMountPoints(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts tmpfs and needs root (see docs/development.md)")
	}
	base := t.TempDir()
	stateDir := filepath.Join(base, "yonder")
	machines := filepath.Join(stateDir, "machines")
	left := filepath.Join(machines, "yonder-reset-mounts", "proc")
	mount := func(dir string) {
		g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
		g.Expect(syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m")).To(Succeed())
		t.Cleanup(func() {
			for _, m := range MountsBelow(base) { // whatever the test left, deepest first
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		})
	}
	mount(stateDir)
	mount(machines)
	mount(left)
	g.Expect(os.WriteFile(filepath.Join(stateDir, "state.json"), []byte("{}"), 0o600)).To(Succeed())

	rep, err := Reset(context.Background(), Options{
		StateDir: stateDir, ConfigPath: filepath.Join(base, "none.yaml"), SentinelPath: filepath.Join(base, "sentinel"),
		ProviderIDFile: filepath.Join(base, "provider-id"), SysctlRegistry: filepath.Join(base, "sysctls"), JournalSocket: filepath.Join(base, "none.sock"), Log: io.Discard,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Removed).To(ContainElement("mount " + left))
	g.Expect(MountsBelow(base)).To(Equal([]string{machines, stateDir}), "the operator's mounts stay")
	entries, err := os.ReadDir(machines)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty())
	g.Expect(rep.Kept).To(ContainElement(machines + " (mount point)"))
	g.Expect(filepath.Join(stateDir, "state.json")).NotTo(BeAnExistingFile())
}

// Files that hold secrets get their final mode before their content is readable anywhere: a leftover
// (or planted) temporary name beside the target — a link to a world-readable file — receives nothing,
// and a host file requested 0600 that exists with 0644 ends 0600 (os.WriteFile keeps an existing mode).
func TestSecretFilesAreNeverWrittenUnderAWiderMode(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	spy := filepath.Join(root, "spy")
	g.Expect(os.WriteFile(spy, nil, 0o644)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "etc/kubernetes"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(spy, filepath.Join(root, "etc/kubernetes/bootstrap-kubelet.conf.yonder-tmp"))).To(Succeed())
	w := &writer{root: root}
	w.file("/etc/kubernetes/bootstrap-kubelet.conf", "token: secret\n", 0o600)
	g.Expect(w.err).NotTo(HaveOccurred())
	leaked, err := os.ReadFile(spy)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(leaked)).To(BeEmpty(), "the secret went through the planted temporary name")
	st, err := os.Stat(filepath.Join(root, "etc/kubernetes/bootstrap-kubelet.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	cfg := filepath.Join(root, "etc/yonder/agent-config.yaml")
	g.Expect(os.MkdirAll(filepath.Dir(cfg), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(cfg, []byte("old\n"), 0o644)).To(Succeed())
	g.Expect(os.Chmod(cfg, 0o644)).To(Succeed())
	g.Expect(writeHostFile(agentv1.File{Path: cfg, Content: "bootstrapToken: abcdef.0123456789abcdef\n", Permissions: "0600"})).To(Succeed())
	b, err := os.ReadFile(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("bootstrapToken: abcdef.0123456789abcdef\n"))
	st, err = os.Stat(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)), "an existing file's wider mode is not kept")
	left, err := filepath.Glob(filepath.Join(root, "etc/*/*.yonder-tmp-*"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no temporary file stays")
}

// Reset removes the files that made the host this node, the AgentConfig with its spent token and the
// providerID file, and their /etc/yonder and the sentinel's /run/cluster-api once empty; a directory that
// still holds something else, or that is not the node's own (a config in /root), stays. Run again, it
// finds nothing left and succeeds.
func TestResetRemovesTheNodesFilesAndTheirEmptiedDirectories(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts tmpfs and needs root (see docs/development.md)")
	}
	base := t.TempDir()
	write := func(p string) string {
		g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(p, []byte("x\n"), 0o600)).To(Succeed())
		return p
	}
	reset := func(config, providerID, sentinel string) *ResetReport {
		rep, err := Reset(context.Background(), Options{
			StateDir: filepath.Join(base, "state"), ConfigPath: config, ProviderIDFile: providerID, SentinelPath: sentinel,
			SysctlRegistry: filepath.Join(base, "sysctls"), JournalSocket: filepath.Join(base, "none.sock"), Log: io.Discard,
		})
		g.Expect(err).NotTo(HaveOccurred())
		return rep
	}
	config := write(filepath.Join(base, "etc", "yonder", "agent-config.yaml"))
	providerID := write(filepath.Join(base, "etc", "yonder", "provider-id"))
	sentinel := write(filepath.Join(base, "run", "cluster-api", "bootstrap-success.complete"))
	rep := reset(config, providerID, sentinel)
	g.Expect(rep.Removed).To(ContainElements(config, providerID, sentinel, filepath.Dir(config), filepath.Dir(sentinel)))
	g.Expect(filepath.Join(base, "etc")).To(BeADirectory(), "the host's /etc stays")
	g.Expect(filepath.Join(base, "etc", "yonder")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(base, "run", "cluster-api")).NotTo(BeAnExistingFile())
	g.Expect(reset(config, providerID, sentinel).Removed).NotTo(ContainElement(config), "a second reset finds nothing")

	config = write(filepath.Join(base, "etc", "yonder", "agent-config.yaml"))
	other := write(filepath.Join(base, "etc", "yonder", "boot-server.pub"))
	elsewhere := write(filepath.Join(base, "root", "agent.yaml"))
	reset(config, elsewhere, sentinel)
	g.Expect(config).NotTo(BeAnExistingFile())
	g.Expect(other).To(BeAnExistingFile(), "a file that is not the node's stays, and so does its directory")
	g.Expect(elsewhere).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(base, "root")).To(BeADirectory(), "a directory that is not the node's own stays, even empty")

	// /etc/yonder as a filesystem of its own (the e2e hosts' private directories): emptied, kept.
	g.Expect(os.Remove(other)).To(Succeed())
	g.Expect(syscall.Mount("tmpfs", filepath.Dir(config), "tmpfs", 0, "size=1m")).To(Succeed())
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Dir(config), syscall.MNT_DETACH) })
	config = write(config)
	rep = reset(config, providerID, sentinel)
	g.Expect(config).NotTo(BeAnExistingFile())
	g.Expect(rep.Kept).To(ContainElement(filepath.Dir(config) + " (mount point)"))
}
