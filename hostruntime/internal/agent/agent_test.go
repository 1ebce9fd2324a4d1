package agent

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
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
