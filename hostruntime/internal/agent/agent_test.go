package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/bootunit"
	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/preflight"
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
	sys, dev, proc := t.TempDir(), t.TempDir(), t.TempDir()
	bind := func(addr, vendor, driver string) {
		d := filepath.Join(sys, "bus/pci/devices", addr)
		g.Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(d, "class"), []byte("0x030000\n"), 0o644)).To(Succeed())
		_ = os.Remove(filepath.Join(d, "driver"))
		g.Expect(os.Symlink("../../../bus/pci/drivers/"+driver, filepath.Join(d, "driver"))).To(Succeed())
	}
	bind("0000:01:00.0", "0x10de", "nvidia")
	bind("0000:02:00.0", "0x1002", "amdgpu")
	for _, n := range []string{"nvidia0", "nvidiactl", "kfd"} {
		g.Expect(os.WriteFile(filepath.Join(dev, n), nil, 0o600)).To(Succeed())
	}
	g.Expect(os.MkdirAll(filepath.Join(dev, "dri"), 0o755)).To(Succeed())

	newRun := func(mode agentv1.GPUMode) *run {
		o := &Options{SysRoot: sys, DevRoot: dev, ProcRoot: proc, MachineName: "m"}
		g.Expect(o.defaults("n")).To(Succeed())
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		return &run{o: o, cfg: &agentv1.AgentConfig{GPU: agentv1.GPU{Mode: mode}}, st: &state.State{}, log: log}
	}
	r := newRun(agentv1.GPUModeAuto)
	res, err := r.detectGPU()
	g.Expect(err).NotTo(HaveOccurred())
	r.gpu = res
	g.Expect(res.Labels()).To(HaveKeyWithValue("yonder.dev/gpu.vendor", "mixed"))
	g.Expect(r.nspawnConfig().DeviceBinds).To(ConsistOf(
		filepath.Join(dev, "dri")+":/dev/dri", filepath.Join(dev, "kfd")+":/dev/kfd",
		filepath.Join(dev, "nvidia0")+":/dev/nvidia0", filepath.Join(dev, "nvidiactl")+":/dev/nvidiactl"))

	// yonder-agent preflight shows the same before any bootstrap.
	c := gpuCheck(*r.o)
	g.Expect(c.Severity).To(Equal(preflight.OK))
	g.Expect(c.Message).To(Equal("2 GPU(s) for the node: 0000:01:00.0 nvidia, 0000:02:00.0 amd"))

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
	g.Expect(err).To(MatchError(ContainSubstring("no AMD GPU (PCI vendor 0x1002) is on this host")))

	// A GPU kept for a VM's passthrough is no GPU for the node's containers: mode NVIDIA says which
	// driver holds it and what to do; mode Auto leaves it out of the labels and binds.
	bind("0000:01:00.0", "0x10de", "vfio-pci")
	_, err = newRun(agentv1.GPUModeNVIDIA).detectGPU()
	g.Expect(err).To(MatchError(ContainSubstring("no NVIDIA GPU on this host has the nvidia driver bound: 0000:01:00.0 (vfio-pci)")))
	var h *hinted
	g.Expect(errors.As(err, &h)).To(BeTrue())
	g.Expect(h.hint).To(ContainSubstring("lspci -k"))
	r = newRun(agentv1.GPUModeAuto)
	res, err = r.detectGPU()
	g.Expect(err).NotTo(HaveOccurred())
	r.gpu = res
	g.Expect(res.Labels()).To(BeEmpty())
	g.Expect(r.nspawnConfig().DeviceBinds).To(BeEmpty())
	c = gpuCheck(*r.o)
	g.Expect(c.Severity).To(Equal(preflight.Warn))
	g.Expect(c.Message).To(Equal("1 GPU(s) without their compute driver, left out: 0000:01:00.0 nvidia (vfio-pci)"))
	g.Expect(c.Fix).To(ContainSubstring("lspci -k"))
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
	left, err := filepath.Glob(filepath.Join(root, "etc/*/.*.tmp-*")) // pkg/atomicfile's temporary names
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

// fakeSystemctl records systemctl calls; is-enabled answers "disabled" until enable ran.
type fakeSystemctl struct {
	calls   []string
	enabled bool
}

func (f *fakeSystemctl) run(_ context.Context, args ...string) ([]byte, error) {
	f.calls = append(f.calls, strings.Join(args, " "))
	switch args[0] {
	case "is-enabled":
		if f.enabled {
			return []byte("enabled\n"), nil
		}
		return []byte("disabled\n"), errors.New("exit status 1")
	case "enable":
		f.enabled = true
	case "disable":
		f.enabled = false
	}
	return nil, nil
}

// bootHost is a host for the boot unit: its unit directory in a temporary directory, its systemctl
// faked, systemd as PID 1 or not.
func bootHost(t *testing.T, systemd bool) (*Options, *fakeSystemctl) {
	t.Helper()
	f := &fakeSystemctl{}
	o := &Options{
		ConfigPath: "/etc/yonder/agent-config.yaml", StateDir: t.TempDir(), AgentPath: "/usr/local/bin/yonder-agent", Log: io.Discard,
		BootUnits: bootunit.Manager{Dir: t.TempDir(), Systemctl: f.run, Systemd: func() bool { return systemd }},
	}
	if err := o.defaults("edge-1"); err != nil {
		t.Fatal(err)
	}
	return o, f
}

// The boot unit runs the bootstrap the host ran: the same AgentConfig and every host-side flag that is
// not its default, with absolute paths (systemd starts it in /), and the base slot's names (bootstrap
// follows the active blue/green slot itself).
func TestBootArgsCarryTheNodesFlagsWithAbsolutePaths(t *testing.T) {
	g := NewWithT(t)
	o := Options{AgentPath: "/usr/local/bin/yonder-agent"}
	g.Expect(o.defaults("edge.example.com")).To(Succeed())
	g.Expect(o.bootArgs("edge.example.com")).To(Equal([]string{"/usr/local/bin/yonder-agent", "bootstrap", "--config=/etc/yonder/agent-config.yaml"}),
		"a host with the defaults gets a plain command line")

	wd, err := os.Getwd()
	g.Expect(err).NotTo(HaveOccurred())
	o = Options{
		AgentPath: "bin/yonder-agent", ConfigPath: "node.yaml", StateDir: "/srv/yonder", MachineName: "n1", CgroupName: "n1-cg",
		SentinelPath: "/run/n1/done", ProviderIDFile: "/srv/n1/provider-id", NetworkNamespacePath: "/run/netns/h1",
		PodCIDR: "10.244.1.0/24", SandboxImage: "example.org/pause:3.10", NodeLeaseDurationSeconds: 10, ReadyTimeout: 2 * time.Minute,
	}
	g.Expect(o.defaults("edge")).To(Succeed())
	o.useSlot(o.baseMachine + GreenSuffix) // an upgrade switched slots
	g.Expect(o.bootArgs("edge")).To(Equal([]string{
		filepath.Join(wd, "bin/yonder-agent"), "bootstrap", "--config=" + filepath.Join(wd, "node.yaml"),
		"--state-dir=/srv/yonder", "--machine-name=n1", "--cgroup-name=n1-cg", "--sentinel=/run/n1/done",
		"--provider-id-file=/srv/n1/provider-id", "--network-namespace-path=/run/netns/h1", "--pod-cidr=10.244.1.0/24",
		"--sandbox-image=example.org/pause:3.10", "--node-lease-duration-seconds=10", "--ready-timeout=2m0s",
	}))

	o = Options{}
	g.Expect(o.defaults("edge")).To(Succeed())
	argv, err := o.bootArgs("edge")
	g.Expect(err).NotTo(HaveOccurred())
	self, err := os.Executable()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(argv[0]).To(Equal(self), "without AgentPath: the running agent's own path")
}

// On a host whose PID 1 is systemd the boot phase installs and enables the node's unit, and leaves it
// alone on the next bootstrap; on a host without systemd it writes nothing and runs no systemctl.
func TestBootPhaseInstallsTheUnitWhereSystemdIsPID1Only(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	o, f := bootHost(t, true)
	r := &run{o: o, cfg: &agentv1.AgentConfig{NodeName: "edge-1"}, st: &state.State{}, log: slog.New(slog.DiscardHandler)}
	inputs, err := r.boot(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inputs).To(Equal("yonder-node-yonder-edge-1.service"))
	unit := filepath.Join(o.BootUnits.Dir, "yonder-node-yonder-edge-1.service")
	content, err := os.ReadFile(unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(content)).To(ContainSubstring("\nExecStart=/usr/local/bin/yonder-agent bootstrap --config=/etc/yonder/agent-config.yaml --state-dir=" + o.StateDir + "\n"))
	g.Expect(f.calls).To(Equal([]string{"daemon-reload", "is-enabled yonder-node-yonder-edge-1.service", "enable yonder-node-yonder-edge-1.service"}))
	f.calls = nil
	_, err = r.boot(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.calls).To(Equal([]string{"is-enabled yonder-node-yonder-edge-1.service"}), "a converged host: nothing written, nothing reloaded")

	o, f = bootHost(t, false)
	r = &run{o: o, cfg: &agentv1.AgentConfig{NodeName: "edge-1"}, st: &state.State{}, log: slog.New(slog.DiscardHandler)}
	inputs, err = r.boot(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inputs).To(BeEmpty())
	g.Expect(os.ReadDir(o.BootUnits.Dir)).To(BeEmpty())
	g.Expect(f.calls).To(BeEmpty())
}

// Reset stops, disables and removes the node's boot unit and reloads systemd, and says so; a host
// without one lists nothing more. Status shows the unit under its base slot's name while the green slot
// is active.
func TestResetRemovesTheBootUnitAndStatusShowsIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	o, f := bootHost(t, true)
	_, err := installBootUnit(ctx, o, "edge-1", slog.New(slog.DiscardHandler))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(state.Store{Dir: o.StateDir}.Save(&state.State{NodeName: "edge-1",
		Machine: &state.Machine{Name: "yonder-edge-1" + GreenSuffix, Base: "yonder-edge-1"}})).To(Succeed())
	s, err := GetStatus(ctx, Options{StateDir: o.StateDir, ConfigPath: filepath.Join(o.StateDir, "none.yaml"), BootUnits: o.BootUnits})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Machine.Name).To(Equal("yonder-edge-1" + GreenSuffix))
	g.Expect(s.BootUnit).To(Equal(&bootunit.Status{Name: "yonder-node-yonder-edge-1.service", Installed: true, Enabled: "enabled"}))

	rep := &ResetReport{}
	f.calls = nil
	g.Expect(rep.removeBootUnit(ctx, *o)).To(BeEmpty())
	unit := filepath.Join(o.BootUnits.Dir, "yonder-node-yonder-edge-1.service")
	g.Expect(rep.Removed).To(Equal([]string{unit}))
	g.Expect(unit).NotTo(BeAnExistingFile())
	g.Expect(f.calls).To(Equal([]string{"disable --now yonder-node-yonder-edge-1.service", "daemon-reload"}))

	rep = &ResetReport{}
	g.Expect(rep.removeBootUnit(ctx, *o)).To(BeEmpty())
	g.Expect(rep.Removed).To(BeEmpty())

	o, _ = bootHost(t, false)
	g.Expect(state.Store{Dir: o.StateDir}.Save(&state.State{NodeName: "edge-1", Machine: &state.Machine{Name: "yonder-edge-1", Base: "yonder-edge-1"}})).To(Succeed())
	s, err = GetStatus(ctx, Options{StateDir: o.StateDir, ConfigPath: filepath.Join(o.StateDir, "none.yaml"), BootUnits: o.BootUnits})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.BootUnit).To(BeNil(), "no systemd, no unit: nothing to show")
}

// After a reboot the Node still shows the previous kubelet's Ready: a machine started by this run counts
// only a heartbeat from its own kubelet.
func TestNodeReadyNeedsAHeartbeatFromTheKubeletJustStarted(t *testing.T) {
	g := NewWithT(t)
	launched := time.Date(2026, 5, 1, 10, 0, 30, 500_000_000, time.UTC)
	node := func(status corev1.ConditionStatus, heartbeat time.Time) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat)},
		}}}
	}
	stale := node(corev1.ConditionTrue, launched.Add(-30*time.Second))
	g.Expect(nodeReady(stale, time.Time{})).To(BeTrue(), "a running machine left alone: Ready is Ready")
	g.Expect(nodeReady(stale, launched)).To(BeFalse())
	g.Expect(nodeReady(node(corev1.ConditionTrue, launched.Add(2*time.Second)), launched)).To(BeTrue())
	g.Expect(nodeReady(node(corev1.ConditionTrue, launched.Truncate(time.Second)), launched)).To(BeTrue(), "heartbeats have seconds only")
	g.Expect(nodeReady(node(corev1.ConditionFalse, launched.Add(2*time.Second)), launched)).To(BeFalse())
	g.Expect(nodeReady(&corev1.Node{}, time.Time{})).To(BeFalse())
}

// An upgrade's rollback starts the previous machine again with the GPUs it ran with (recorded in the
// state when it started), not with the upgrade's own detection, which a new gpu.mode None leaves empty.
func TestRollbackRestartsThePreviousMachineWithItsDeviceBinds(t *testing.T) {
	g := NewWithT(t)
	dev := t.TempDir()
	active := Options{DevRoot: dev, MachineName: "yonder-n-a"}
	g.Expect(active.defaults("n")).To(Succeed())
	upgrade := &run{cfg: &agentv1.AgentConfig{GPU: agentv1.GPU{Mode: agentv1.GPUModeNone}}, st: &state.State{}, gpu: &gpu.Result{}}
	rb := rollbackRun(rollbackInput{active: active, run: upgrade,
		activeMachine: state.Machine{Name: "yonder-n-a", DeviceNodes: []string{"nvidia0", "nvidiactl", "nvidia-uvm"}}})
	g.Expect(rb.nspawnConfig().DeviceBinds).To(Equal([]string{
		filepath.Join(dev, "nvidia0") + ":/dev/nvidia0", filepath.Join(dev, "nvidiactl") + ":/dev/nvidiactl", filepath.Join(dev, "nvidia-uvm") + ":/dev/nvidia-uvm"}))
	g.Expect(rb.o.MachineName).To(Equal("yonder-n-a"))
}
