package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/hostprep"
	"github.com/yonder-dev/yonder/hostruntime/internal/nspawn"
	"github.com/yonder-dev/yonder/hostruntime/internal/preflight"
	"github.com/yonder-dev/yonder/hostruntime/internal/render"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// Phase names, in order.
const (
	PhasePreflight = "preflight"
	PhaseHost      = "host"
	PhaseArtifacts = "artifacts"
	PhaseRootfs    = "rootfs"
	PhaseConfigure = "configure"
	PhaseMachine   = "machine"
	PhaseJoin      = "join"
	PhaseSentinel  = "sentinel"
)

// Phases lists the bootstrap phases in order.
var Phases = []string{PhasePreflight, PhaseArtifacts, PhaseHost, PhaseRootfs, PhaseConfigure, PhaseMachine, PhaseJoin, PhaseSentinel}

// Artifact names with a meaning (docs/agent.md). Names starting with ImagePrefix are OCI image archives
// imported into containerd's k8s.io namespace.
var binaryArtifacts = map[string]bool{"kubelet": true, "containerd": true, "containerd-shim-runc-v2": true, "ctr": true, "runc": true, "kubectl": true}

const (
	// ImagePrefix marks OCI image archive artifacts ("image/pause").
	ImagePrefix = "image/"
	// CNIPluginsArtifact is a tar.gz of CNI plugin binaries, unpacked into /opt/cni/bin.
	CNIPluginsArtifact = "cni-plugins"
)

var requiredArtifacts = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"}

// PhaseError says which phase failed, why, and what to do.
type PhaseError struct {
	Phase string
	Err   error
	Hint  string
}

func (e *PhaseError) Error() string {
	msg := fmt.Sprintf("phase %s failed: %v", e.Phase, e.Err)
	if e.Hint != "" {
		msg += "; what to do: " + e.Hint
	}
	return msg
}

func (e *PhaseError) Unwrap() error { return e.Err }

// hinted lets a phase attach the operator's next step to an error.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }

func withHint(err error, hint string) error { return &hinted{err: err, hint: hint} }

// run is one bootstrap in progress.
type run struct {
	o      *Options
	cfg    *agentv1.AgentConfig
	st     *state.State
	store  state.Store
	log    *slog.Logger
	files  map[string]string // artifact name → verified cache path
	gpu    *gpu.Result
	labels map[string]string
	// changed is set by configure when a file the running machine uses changed.
	changed bool
}

// LoadConfig reads and validates the AgentConfig.
func LoadConfig(path string) (*agentv1.AgentConfig, error) {
	data, err := os.ReadFile(path) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		return nil, fmt.Errorf("cannot read the AgentConfig %s (the bootstrap data writes it; pass --config): %w", path, err)
	}
	cfg, err := agentv1.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("the AgentConfig %s is invalid: %w", path, err)
	}
	return cfg, nil
}

// Bootstrap runs every phase; re-running converges. The returned error is a *PhaseError.
func Bootstrap(ctx context.Context, o Options) error {
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return &PhaseError{Phase: "config", Err: err, Hint: "fix the file and run bootstrap again"}
	}
	if err := o.defaults(cfg.NodeName); err != nil {
		return &PhaseError{Phase: "config", Err: err, Hint: "fix the flag"}
	}
	log, closeLog := o.logger()
	defer closeLog()
	store := state.Store{Dir: o.StateDir}
	st, err := store.Load()
	if err != nil {
		return &PhaseError{Phase: "state", Err: err}
	}
	if st.NodeName != "" && st.NodeName != cfg.NodeName {
		return &PhaseError{Phase: "state", Err: fmt.Errorf("this host already is Node %q, the AgentConfig asks for %q", st.NodeName, cfg.NodeName),
			Hint: "run `yonder-agent reset` first, or use another --state-dir"}
	}
	st.NodeName = cfg.NodeName
	if st.Machine != nil && st.Machine.Name == o.baseMachine+GreenSuffix {
		o.useSlot(st.Machine.Name) // an upgrade switched to the green slot
	}
	r := &run{o: &o, cfg: cfg, st: st, store: store, log: log, files: map[string]string{}}
	steps := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{PhasePreflight, r.preflight},
		// Artifacts are verified before the host is changed at all: a corrupt bundle leaves no trace.
		{PhaseArtifacts, r.artifacts},
		{PhaseHost, r.host},
		{PhaseRootfs, r.rootfs},
		{PhaseConfigure, r.configure},
		{PhaseMachine, r.machine},
		{PhaseJoin, r.join},
		{PhaseSentinel, r.sentinel},
	}
	start := o.Now()
	for _, s := range steps {
		if err := r.phase(ctx, s.name, s.fn); err != nil {
			return err
		}
	}
	log.Info("Bootstrap complete", "node", cfg.NodeName, "seconds", o.Now().Sub(start).Seconds())
	return nil
}

func (r *run) phase(ctx context.Context, name string, fn func(context.Context) (string, error)) error {
	prev := r.st.Phases[name]
	rec := &state.PhaseRecord{Result: state.Started, StartedAt: r.o.Now()}
	if prev != nil {
		rec.Inputs = prev.Inputs
		if prev.Result == state.Started {
			r.log.Info("Resuming interrupted phase", "phase", name)
		}
	}
	r.st.Phases[name] = rec
	if err := r.store.Save(r.st); err != nil {
		return &PhaseError{Phase: name, Err: err, Hint: "check that " + r.o.StateDir + " is writable"}
	}
	r.log.Info("Running phase", "phase", name)
	inputs, err := fn(ctx)
	rec.FinishedAt = r.o.Now()
	rec.DurationSeconds = rec.FinishedAt.Sub(rec.StartedAt).Seconds()
	if err != nil {
		rec.Result, rec.Message = state.Failed, err.Error()
		_ = r.store.Save(r.st)
		pe := &PhaseError{Phase: name, Err: err}
		var h *hinted
		if errors.As(err, &h) {
			pe.Hint = h.hint
		}
		r.log.Error("Phase failed", "phase", name, "err", err.Error(), "hint", pe.Hint)
		return pe
	}
	rec.Result, rec.Inputs = state.Succeeded, inputs
	r.log.Info("Phase done", "phase", name, "seconds", rec.DurationSeconds)
	return r.store.Save(r.st)
}

// bpffsMountPoint is where the kernel offers the BPF filesystem's mount point.
const bpffsMountPoint = "/sys/fs/bpf"

func (r *run) nspawnConfig() nspawn.Config {
	c := nspawn.Config{
		Name:                 r.o.MachineName,
		Rootfs:               r.o.rootfsDir(),
		NetworkNamespacePath: r.o.NetworkNamespacePath,
		LogFile:              filepath.Join(r.o.logDir(), "machine-"+r.o.MachineName+".log"),
	}
	// nspawn's /sys is a read-only tmpfs whose fs/ holds only cgroup and selinux: without the host's
	// /sys/fs/bpf there is no mount point for a bpffs, and a pod mounting it as a hostPath (the network
	// add-on's yonder-net-node) never starts ("mkdir /sys/fs/bpf: read-only file system"). Bound only where
	// the kernel has it: nspawn refuses to start with a bind whose source is missing.
	if st, err := os.Stat(bpffsMountPoint); err == nil && st.IsDir() {
		c.Binds = append(c.Binds, bpffsMountPoint)
	}
	// The host's kernel modules, for pods that load or inspect them (yonder-net-node mounts /lib/modules);
	// without them the prep unit creates an empty /lib/modules so such a hostPath still resolves.
	if st, err := os.Stat("/lib/modules"); err == nil && st.IsDir() {
		c.ReadOnlyBinds = append(c.ReadOnlyBinds, "/lib/modules")
	}
	if r.gpu != nil {
		dev := r.o.DevRoot
		if dev == "" {
			dev = "/dev"
		}
		for _, n := range r.gpu.DeviceNodes {
			c.DeviceBinds = append(c.DeviceBinds, filepath.Join(dev, n)+":/dev/"+n)
		}
	}
	return c
}

func (r *run) preflight(_ context.Context) (string, error) {
	in := preflight.Input{StateDir: r.o.StateDir, MinFreeBytes: 2 << 30, Tools: []string{"systemd-nspawn", "tar", "nsenter"}}
	if r.nspawnConfig().Running() == 0 {
		in.Ports = []int{10250} // the kubelet's; ours once the machine runs
	}
	if r.cfg.Rootfs.Archive == nil && r.cfg.Rootfs.Image == "" {
		in.Tools = append(in.Tools, "debootstrap", "zstd")
	}
	rep := preflight.Run(in)
	for _, c := range rep.Checks {
		if c.Severity != preflight.OK {
			r.log.Warn("Preflight", "check", c.Name, "severity", c.Severity, "message", c.Message, "fix", c.Fix)
		}
	}
	var errs []error
	if err := rep.Err(); err != nil {
		errs = append(errs, err)
	}
	have := map[string]bool{}
	for _, a := range r.cfg.Artifacts {
		have[a.Name] = true
		if !binaryArtifacts[a.Name] && a.Name != CNIPluginsArtifact && !strings.HasPrefix(a.Name, ImagePrefix) {
			errs = append(errs, fmt.Errorf("artifact %q has no meaning: name binaries kubelet, containerd, containerd-shim-runc-v2, ctr, runc, kubectl, the CNI plugins tarball %q, or images %q<name>", a.Name, CNIPluginsArtifact, ImagePrefix))
		}
	}
	for _, n := range requiredArtifacts {
		if !have[n] {
			errs = append(errs, fmt.Errorf("artifact %q is missing from the AgentConfig", n))
		}
	}
	if r.cfg.Rootfs.Image != "" {
		errs = append(errs, errors.New("rootfs.image (an OCI image as the rootfs) is not supported by this agent version"))
	}
	if len(errs) > 0 {
		return "", withHint(errors.Join(errs...), "fix the host or the AgentConfig as each line says, then run bootstrap again (`yonder-agent preflight` prints the full report)")
	}
	return "", nil
}

func (r *run) host(ctx context.Context) (string, error) {
	changed, orig, err := r.o.sysctlRegistry().Acquire(r.o.baseMachine, hostprep.KubeletSysctls)
	r.st.Sysctls = orig
	if serr := r.store.Save(r.st); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return "", withHint(err, "the kubelet needs these sysctls set on the host; run the agent as root outside a read-only /proc/sys")
	}
	if len(changed) > 0 {
		r.log.Info("Set host sysctls (originals saved for reset)", "sysctls", changed)
	}
	// Files and pre-commands run once per bootstrap of this node (commands are not assumed idempotent).
	if prev := r.st.Phases[PhaseHost]; prev != nil && prev.Inputs == "files-done" {
		return "files-done", nil
	}
	for _, f := range r.cfg.Files {
		if err := writeHostFile(f); err != nil {
			return "", withHint(err, "fix files[] in the AgentConfig")
		}
	}
	for i, c := range r.cfg.PreCommands {
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", c).CombinedOutput()
		if err != nil {
			return "", withHint(fmt.Errorf("preCommands[%d] failed: %s: %w", i, tail(out), err), "fix the command; it runs again on the next bootstrap")
		}
	}
	return "files-done", nil
}

func (r *run) artifacts(ctx context.Context) (string, error) {
	cache := artifacts.Cache{Dir: filepath.Join(r.o.cacheDir(), "artifacts")}
	all := append([]agentv1.Artifact(nil), r.cfg.Artifacts...)
	if r.cfg.Rootfs.Archive != nil {
		a := *r.cfg.Rootfs.Archive
		a.Name = "rootfs"
		all = append(all, a)
	}
	for _, a := range all {
		p, err := cache.Ensure(ctx, a)
		if err != nil {
			return "", withHint(err, "nothing was installed; correct the artifact source or its sha256 and run bootstrap again")
		}
		r.files[a.Name] = p
	}
	return "", nil
}

func (r *run) rootfs(ctx context.Context) (string, error) {
	archive, digest := r.files["rootfs"], ""
	if r.cfg.Rootfs.Archive != nil {
		digest = r.cfg.Rootfs.Archive.SHA256
	} else {
		archive = filepath.Join(r.o.cacheDir(), "rootfs", rootfs.DefaultSuite+"-debootstrap.tar.zst")
		r.log.Info("Building the default rootfs with debootstrap (once; minutes)", "archive", archive)
		if err := os.MkdirAll(filepath.Dir(archive), 0o700); err != nil {
			return "", err
		}
		if err := rootfs.Debootstrap(ctx, archive, rootfs.DefaultSuite, rootfs.DefaultPackages, "", r.o.Log); err != nil {
			return "", withHint(err, "set rootfs.archive in the AgentConfig on hosts without a reachable Debian mirror")
		}
		d, err := artifacts.FileSHA256(archive)
		if err != nil {
			return "", err
		}
		digest = d
	}
	dir := r.o.rootfsDir()
	if prev := r.st.Phases[PhaseRootfs]; prev != nil && prev.Inputs == digest && rootfs.Init(dir) != "" {
		return digest, nil
	}
	if pid := r.nspawnConfig().Running(); pid != 0 {
		return "", withHint(fmt.Errorf("the rootfs changed (now %s) but machine %s is running from the old one", short(digest), r.o.MachineName),
			"run `yonder-agent reset` (or upgrade) to replace a running node's rootfs")
	}
	if err := os.MkdirAll(r.o.machinesDir(), 0o700); err != nil {
		return "", err
	}
	r.log.Info("Extracting rootfs", "dir", dir, "sha256", short(digest))
	if err := rootfs.Extract(ctx, archive, dir); err != nil {
		return "", withHint(err, "check the rootfs archive; it must be a tar(.gz|.zst) of a Linux tree with systemd")
	}
	return digest, nil
}

// configure writes everything inside the machine's tree. Files are compared first and left untouched
// when equal, so a converged node is not restarted.
func (r *run) configure(_ context.Context) (string, error) {
	var err error
	if r.gpu, err = r.detectGPU(); err != nil {
		return "", err
	}
	root := r.o.rootfsDir()
	w := &writer{root: root}
	providerID := r.cfg.ProviderID
	if providerID == "" {
		if b, err := os.ReadFile(r.o.ProviderIDFile); err == nil {
			providerID = strings.TrimSpace(string(b))
		}
	}
	r.labels = map[string]string{}
	for k, v := range r.cfg.Labels {
		r.labels[k] = v
	}
	for k, v := range r.gpu.Labels() {
		if _, set := r.labels[k]; !set {
			r.labels[k] = v
		}
	}
	cniDirs := []string{render.CNIBinDirOpt, render.CNIBinDirDebian}
	in := render.Input{
		Config: r.cfg, ProviderID: providerID, Labels: r.labels, SandboxImage: r.o.SandboxImage, CNIBinDirs: cniDirs,
		NVIDIARuntime:            fileExists(filepath.Join(root, "usr/bin/nvidia-container-runtime")),
		NodeLeaseDurationSeconds: r.o.NodeLeaseDurationSeconds,
	}
	if r.o.NetworkNamespacePath == "" {
		in.NodeIP = localAddressTo(r.cfg.APIServer.Endpoint)
	}
	for name, p := range r.files {
		switch {
		case binaryArtifacts[name]:
			w.copyVerified(p, filepath.Join(render.BinDir, name), 0o755)
		case strings.HasPrefix(name, ImagePrefix):
			w.copyVerified(p, filepath.Join(render.ImagesDir, strings.ReplaceAll(strings.TrimPrefix(name, ImagePrefix), "/", "_")+".tar"), 0o644)
		case name == CNIPluginsArtifact:
			w.untarOnce(p, render.CNIBinDirOpt)
		}
	}
	kubeletCfg, err := render.KubeletConfigYAML(in)
	if err != nil {
		return "", err
	}
	w.file(render.ContainerdConfig, render.ContainerdTOML(in), 0o644)
	w.file(render.KubeletConfig, kubeletCfg, 0o644)
	w.file(render.KubeletEnvFile, render.KubeletEnv(in), 0o644)
	w.file(render.CAFile, r.cfg.APIServer.CACertificate, 0o644)
	// The bootstrap kubeconfig holds the token: 0600, never logged.
	w.file(render.KubeletBootstrapConfig, render.Kubeconfig(r.cfg.APIServer.Endpoint, r.cfg.BootstrapToken, ""), 0o600)
	// The machine shares the host's network: it resolves like the host (containerd pulls images), and its
	// own name resolves without DNS (the kubelet looks it up while registering; an unreachable resolver
	// would delay registration by its timeouts).
	resolv := "# yonder-agent: the host has no /etc/resolv.conf\n"
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		resolv = string(b)
	}
	w.file("/etc/resolv.conf", resolv, 0o644)
	hostsFile := "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
	if in.NodeIP != "" {
		hostsFile += in.NodeIP + " " + r.cfg.NodeName + "\n"
	}
	w.file("/etc/hosts", hostsFile, 0o644)
	if r.o.PodCIDR != "" {
		w.file(render.CNIConfFile, render.CNIConflist(r.o.PodCIDR), 0o644)
	}
	units := render.Units(in)
	names := make([]string, 0, len(units))
	for n := range units {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w.file(filepath.Join(render.UnitDir, n), units[n], 0o644)
		w.symlink(filepath.Join(render.UnitDir, n), filepath.Join(render.WantsDir, n))
	}
	if w.err != nil {
		return "", withHint(w.err, "check free space and permissions under "+root)
	}
	r.changed = len(w.changed) > 0
	if r.changed {
		r.log.Info("Wrote machine files", "files", w.changed)
	}
	return "", nil
}

func (r *run) detectGPU() (*gpu.Result, error) {
	mode := r.cfg.GPU.Mode
	if mode == "" || mode == agentv1.GPUModeNone {
		return &gpu.Result{}, nil
	}
	res, err := gpu.Detect(gpu.Roots{Sys: r.o.SysRoot, Dev: r.o.DevRoot})
	if err != nil {
		return nil, err
	}
	r.st.GPU = res.Labels()
	switch {
	case mode == agentv1.GPUModeNVIDIA && res.Count("nvidia") == 0:
		return nil, withHint(errors.New("gpu.mode is NVIDIA but no NVIDIA GPU (PCI vendor 0x10de) is on this host"), "use gpu.mode Auto or None, or check the GPU is visible in lspci")
	case mode == agentv1.GPUModeAMD && res.Count("amd") == 0:
		return nil, withHint(errors.New("gpu.mode is AMD but no AMD GPU (PCI vendor 0x1002) is on this host"), "use gpu.mode Auto or None, or check the GPU is visible in lspci")
	}
	switch mode {
	case agentv1.GPUModeAMD:
		res = filterVendor(res, "amd")
	case agentv1.GPUModeNVIDIA:
		res = filterVendor(res, "nvidia")
	}
	return res, nil
}

func filterVendor(res *gpu.Result, vendor string) *gpu.Result {
	out := &gpu.Result{}
	for _, d := range res.Devices {
		if d.Vendor == vendor {
			out.Devices = append(out.Devices, d)
		}
	}
	for _, n := range res.DeviceNodes {
		if (vendor == "nvidia" && strings.HasPrefix(n, "nvidia")) || (vendor == "amd" && n == "kfd") || n == "dri" {
			out.DeviceNodes = append(out.DeviceNodes, n)
		}
	}
	return out
}

func (r *run) machine(ctx context.Context) (string, error) {
	c := r.nspawnConfig()
	cg := nspawnCgroups(r.o)
	paths, err := cg.Create()
	if err != nil {
		return "", withHint(err, "the agent needs writable cgroup hierarchies under /sys/fs/cgroup")
	}
	r.st.CgroupPaths = paths
	digest := c.Digest()
	if pid := c.Running(); pid != 0 {
		if r.st.Machine != nil && r.st.Machine.ConfigDigest == digest && !r.changed {
			r.st.Machine.LauncherPID = pid
			return digest, nil
		}
		r.log.Info("Restarting machine: its configuration changed", "machine", c.Name)
		unit := ""
		if r.st.Machine != nil {
			unit = r.st.Machine.Unit
		}
		if err := c.Stop(ctx, unit, r.o.StopGrace); err != nil {
			return "", err
		}
	}
	// Everything left in the subtree belongs to a previous incarnation of this machine.
	if procs, _ := cg.Procs(); len(procs) > 0 {
		if err := cg.KillAndRemove(10 * time.Second); err != nil {
			return "", err
		}
		if paths, err = cg.Create(); err != nil {
			return "", err
		}
	}
	pid, unit, err := c.Start(ctx, paths)
	if err != nil {
		return "", withHint(err, "see "+c.LogFile)
	}
	r.st.Machine = &state.Machine{Name: c.Name, Base: r.o.baseMachine, Rootfs: c.Rootfs, LauncherPID: pid, Unit: unit, ConfigDigest: digest, StartedAt: r.o.Now()}
	if err := r.store.Save(r.st); err != nil {
		return "", err
	}
	r.log.Info("Started machine", "machine", c.Name, "pid", pid, "systemdUnit", unit)
	// The machine is up once its init runs; the join phase waits for the kubelet itself.
	deadline := time.Now().Add(30 * time.Second)
	for nspawn.Leader(pid) == 0 {
		if syscall.Kill(pid, 0) != nil || time.Now().After(deadline) {
			return "", withHint(fmt.Errorf("machine %s did not boot: %s", c.Name, tail(readFile(c.LogFile))), "see "+c.LogFile)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return digest, nil
}

// join waits for the kubelet's TLS bootstrap, the Node, its pod CIDR (then writes the CNI config) and
// Readiness.
func (r *run) join(ctx context.Context) (string, error) {
	root := r.o.rootfsDir()
	ctx, cancel := context.WithTimeout(ctx, r.o.ReadyTimeout)
	defer cancel()
	kubeletLog := filepath.Join(root, render.LogDir, "kubelet.log")
	hint := "see the kubelet log " + kubeletLog + " and " + filepath.Join(root, render.LogDir, "containerd.log")
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) { return fileExists(inRoot(root, render.KubeletClientCert)), nil }); err != nil {
		return "", withHint(fmt.Errorf("the kubelet did not obtain a client certificate (TLS bootstrap) within %s: %s", r.o.ReadyTimeout, tail(readFile(kubeletLog))),
			"check the bootstrap token is valid and the cluster auto-approves node client CSRs (system:bootstrappers → nodeclient); "+hint)
	}
	cs, err := kubeletClient(r.cfg.APIServer.Endpoint, r.cfg.APIServer.CACertificate, root)
	if err != nil {
		return "", err
	}
	var node *corev1.Node
	cniWritten := r.o.PodCIDR != ""
	err = waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not registered yet
		}
		node = n
		if !cniWritten && n.Spec.PodCIDR != "" {
			w := &writer{root: root}
			w.file(render.CNIConfFile, render.CNIConflist(n.Spec.PodCIDR), 0o644)
			if w.err != nil {
				return false, w.err
			}
			cniWritten = true
			r.log.Info("Wrote CNI config for the Node's pod CIDR", "podCIDR", n.Spec.PodCIDR)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		switch {
		case node == nil:
			return "", withHint(fmt.Errorf("node %s was not registered within %s", r.cfg.NodeName, r.o.ReadyTimeout), hint)
		case !cniWritten:
			return "", withHint(fmt.Errorf("node %s has no spec.podCIDR, so no CNI config was written", r.cfg.NodeName),
				"enable --allocate-node-cidrs on kube-controller-manager, or pass --pod-cidr to yonder-agent")
		default:
			return "", withHint(fmt.Errorf("node %s did not become Ready within %s: %s", r.cfg.NodeName, r.o.ReadyTimeout, readyMessage(node)), hint)
		}
	}
	r.log.Info("Node is Ready", "node", node.Name, "providerID", node.Spec.ProviderID)
	return "", nil
}

// localAddressTo returns this host's source address towards the API server (what the kubelet would
// pick, made explicit so multi-homed hosts register the address the control plane reaches), or "".
func localAddressTo(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port)) // no packet is sent
	if err != nil {
		return ""
	}
	defer func() { _ = c.Close() }()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// inRoot resolves path inside the machine's tree: kubelet-client-current.pem is a symlink with an
// absolute target that means the machine's /var/lib/kubelet, not the host's.
func inRoot(root, path string) string {
	p := path
	for range 8 {
		full := filepath.Join(root, p)
		target, err := os.Readlink(full)
		if err != nil {
			return full
		}
		if filepath.IsAbs(target) {
			p = target
		} else {
			p = filepath.Join(filepath.Dir(p), target)
		}
	}
	return filepath.Join(root, p)
}

// kubeletClient is a client with the kubelet's own (TLS-bootstrapped) identity.
func kubeletClient(endpoint, ca, root string) (*kubernetes.Clientset, error) {
	pem, err := os.ReadFile(inRoot(root, render.KubeletClientCert))
	if err != nil {
		return nil, fmt.Errorf("failed to read the kubelet's client certificate: %w", err)
	}
	return kubernetes.NewForConfig(&rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(ca), CertData: pem, KeyData: pem},
		Timeout:         10 * time.Second,
	})
}

func readyMessage(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition yet"
}

func (r *run) sentinel(ctx context.Context) (string, error) {
	if prev := r.st.Phases[PhaseSentinel]; prev == nil || prev.Inputs != "post-done" {
		for i, c := range r.cfg.PostCommands {
			out, err := exec.CommandContext(ctx, "/bin/sh", "-c", c).CombinedOutput()
			if err != nil {
				return "", withHint(fmt.Errorf("postCommands[%d] failed: %s: %w", i, tail(out), err), "fix the command; it runs again on the next bootstrap")
			}
		}
	}
	if !fileExists(r.o.SentinelPath) {
		if err := os.MkdirAll(filepath.Dir(r.o.SentinelPath), 0o755); err != nil { //nolint:gosec // /run/cluster-api is read by the provider
			return "", err
		}
		if err := os.WriteFile(r.o.SentinelPath, []byte("success\n"), 0o644); err != nil { //nolint:gosec // a public marker
			return "", withHint(err, "the infrastructure provider waits for this file")
		}
	}
	r.st.Sentinel = r.o.SentinelPath
	return "post-done", nil
}

func nspawnCgroups(o *Options) nspawn.Cgroups { return nspawn.Cgroups{Name: o.CgroupName} }

// writer writes files under a root, only when their content differs, and remembers what changed.
type writer struct {
	root    string
	changed []string
	err     error
}

func (w *writer) file(path, content string, mode os.FileMode) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, []byte(content)) { //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
		if st, err := os.Stat(p); err == nil && st.Mode().Perm() == mode {
			return
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	tmp := p + ".yonder-tmp"
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil { //nolint:gosec // paths are the machine's tree joined with our own constants
		w.err = fmt.Errorf("failed to write %s: %w", p, err)
		return
	}
	if err := os.Chmod(tmp, mode); err != nil {
		w.err = err
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		w.err = err
		return
	}
	w.changed = append(w.changed, path)
}

func (w *writer) copyVerified(src, path string, mode os.FileMode) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	want, err := artifacts.FileSHA256(src)
	if err != nil {
		w.err = err
		return
	}
	if got, err := artifacts.FileSHA256(p); err == nil && got == want {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	in, err := os.Open(src) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		w.err = err
		return
	}
	defer func() { _ = in.Close() }()
	tmp := p + ".yonder-tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		w.err = err
		return
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		w.err = err
		return
	}
	if err := out.Close(); err != nil {
		w.err = err
		return
	}
	if err := os.Chmod(tmp, mode); err != nil {
		w.err = err
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		w.err = err
		return
	}
	w.changed = append(w.changed, path)
}

func (w *writer) untarOnce(src, dir string) {
	if w.err != nil {
		return
	}
	digest, err := artifacts.FileSHA256(src)
	if err != nil {
		w.err = err
		return
	}
	stamp := filepath.Join(w.root, dir, ".yonder-"+short(digest))
	if fileExists(stamp) {
		return
	}
	d := filepath.Join(w.root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	if out, err := exec.Command("tar", "-xzf", src, "-C", d).CombinedOutput(); err != nil {
		w.err = fmt.Errorf("failed to unpack %s into %s: %s: %w", src, dir, tail(out), err)
		return
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil { //nolint:gosec // marker
		w.err = err
		return
	}
	w.changed = append(w.changed, dir)
}

func (w *writer) symlink(target, path string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	if cur, err := os.Readlink(p); err == nil && cur == target {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		w.err = err
		return
	}
	w.changed = append(w.changed, path)
}

func writeHostFile(f agentv1.File) error {
	content := []byte(f.Content)
	if f.Encoding == "base64" {
		var err error
		if content, err = decodeBase64(f.Content); err != nil {
			return err
		}
	}
	mode := os.FileMode(0o644)
	if f.Permissions != "" {
		var m uint32
		if _, err := fmt.Sscanf(f.Permissions, "%o", &m); err != nil {
			return fmt.Errorf("file %s: bad permissions %q", f.Path, f.Permissions)
		}
		mode = os.FileMode(m)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil { //nolint:gosec // operator-requested path
		return err
	}
	if err := os.WriteFile(f.Path, content, mode); err != nil {
		return fmt.Errorf("failed to write %s: %w", f.Path, err)
	}
	if f.Owner != "" && f.Owner != "root:root" && f.Owner != "root" {
		if out, err := exec.Command("chown", f.Owner, f.Path).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to chown %s to %s: %s: %w", f.Path, f.Owner, tail(out), err)
		}
	}
	return nil
}

func waitFor(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func readFile(p string) []byte { b, _ := os.ReadFile(p); return b } //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, " | ")
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
