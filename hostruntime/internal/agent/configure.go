package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/render"
)

// configure writes everything inside the machine's tree. Files are compared first and left untouched
// when equal, so a converged node is not restarted.
func (r *run) configure(_ context.Context) (string, error) {
	var err error
	if r.gpu, err = r.detectGPU(); err != nil {
		return "", err
	}
	root := r.o.rootfsDir()
	w := &writer{root: root}
	in := r.renderInput(root)
	r.installArtifacts(w)
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
	r.writeRegistry(w)
	r.writeNameResolution(w, in.NodeIP)
	if r.o.PodCIDR != "" {
		w.file(render.CNIConfFile, render.CNIConflist(r.o.PodCIDR), 0o644)
	}
	writeUnits(w, render.Units())
	if w.err != nil {
		return "", withHint(w.err, "check free space and permissions under "+root)
	}
	r.changed = len(w.changed) > 0
	if r.changed {
		r.log.Info("Wrote machine files", "files", w.changed)
	}
	return "", nil
}

// renderInput gathers what the machine's files are rendered from: provider ID, labels (GPU labels
// added), CNI directories, the node address.
func (r *run) renderInput(root string) render.Input {
	providerID := r.cfg.ProviderID
	if providerID == "" {
		if b, err := os.ReadFile(r.o.ProviderIDFile); err == nil {
			providerID = strings.TrimSpace(string(b))
		}
	}
	if providerID == "" {
		providerID = cloudInitProviderID(r.o.CloudInitInstanceData)
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
	in := render.Input{
		Config: r.cfg, ProviderID: providerID, Labels: r.labels, SandboxImage: r.o.SandboxImage,
		CNIBinDirs:               []string{render.CNIBinDirOpt, render.CNIBinDirDebian},
		NVIDIARuntime:            fileExists(filepath.Join(root, "usr/bin/nvidia-container-runtime")),
		NodeLeaseDurationSeconds: r.o.NodeLeaseDurationSeconds,
	}
	if r.o.NetworkNamespacePath == "" {
		in.NodeIP = localAddressTo(r.cfg.APIServer.Endpoint)
	}
	return in
}

// installArtifacts copies the verified artifacts into the machine: binaries, image archives, CNI plugins.
func (r *run) installArtifacts(w *writer) {
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
}

// writeRegistry tells the machine's containerd about the AgentConfig's registry: its CA, its credentials
// (0600: a credential) and the upstream registries it mirrors.
func (r *run) writeRegistry(w *writer) {
	reg := r.cfg.Registry
	if reg == nil {
		return
	}
	if reg.CACertificate != "" {
		w.file(render.RegistryCAFile, reg.CACertificate, 0o644)
	}
	hosts := render.RegistryHosts(reg)
	for _, p := range sortedKeys(hosts) {
		w.file(p, hosts[p], 0o600)
	}
}

// writeNameResolution gives the machine the host's resolver (it shares the host's network: containerd
// pulls images) and its own name without DNS (the kubelet looks it up while registering; an unreachable
// resolver would delay registration by its timeouts).
func (r *run) writeNameResolution(w *writer, nodeIP string) {
	resolv := "# yonder-agent: the host has no /etc/resolv.conf\n"
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		resolv = string(b)
	}
	w.file("/etc/resolv.conf", resolv, 0o644)
	hostsFile := "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
	if nodeIP != "" {
		hostsFile += nodeIP + " " + r.cfg.NodeName + "\n"
	}
	w.file("/etc/hosts", hostsFile, 0o644)
}

// writeUnits writes the machine's systemd units, each enabled in multi-user.target.
func writeUnits(w *writer, units map[string]string) {
	for _, n := range sortedKeys(units) {
		w.file(filepath.Join(render.UnitDir, n), units[n], 0o644)
		w.symlink(filepath.Join(render.UnitDir, n), filepath.Join(render.WantsDir, n))
	}
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (r *run) detectGPU() (*gpu.Result, error) {
	mode := r.cfg.GPU.Mode
	if mode == "" || mode == agentv1.GPUModeNone {
		return &gpu.Result{}, nil
	}
	res, err := gpu.Detect(gpu.Roots{Sys: r.o.SysRoot, Dev: r.o.DevRoot, Proc: r.o.ProcRoot})
	if err != nil {
		return nil, err
	}
	r.st.GPU = res.Labels()
	for _, d := range res.Unusable {
		r.log.Info("GPU without its compute driver is left out", "address", d.Address, "vendor", d.Vendor, "driver", d.Driver)
	}
	switch {
	case mode == agentv1.GPUModeNVIDIA && res.Count("nvidia") == 0:
		return nil, noGPUError("NVIDIA", gpu.VendorNVIDIA, "nvidia", res.Unusable)
	case mode == agentv1.GPUModeAMD && res.Count("amd") == 0:
		return nil, noGPUError("AMD", gpu.VendorAMD, "amd", res.Unusable)
	}
	switch mode {
	case agentv1.GPUModeAMD:
		res = filterVendor(res, "amd")
	case agentv1.GPUModeNVIDIA:
		res = filterVendor(res, "nvidia")
	}
	return res, nil
}

// noGPUError says why a mode that requires a vendor's GPU found none: none on the bus, or each one held
// by another driver (vfio-pci for a VM, nouveau) or by none, which containers cannot use.
func noGPUError(name, pciVendor, vendor string, unusable []gpu.Device) error {
	var held []string
	for _, d := range unusable {
		if d.Vendor != vendor {
			continue
		}
		held = append(held, d.Address+" ("+d.BoundTo()+")")
	}
	if len(held) == 0 {
		return withHint(fmt.Errorf("gpu.mode is %s but no %s GPU (PCI vendor %s) is on this host", name, name, pciVendor),
			"use gpu.mode Auto or None, or check the GPU is visible in lspci")
	}
	return withHint(fmt.Errorf("gpu.mode is %s but no %s GPU on this host has the %s driver bound: %s", name, name, gpu.ComputeDriver(vendor), strings.Join(held, ", ")),
		"install and load the vendor's driver (lspci -k shows the driver in use; unbind vfio-pci if the GPU is no longer meant for a VM), or use gpu.mode Auto or None")
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

// cloudInitProviderID returns the "providerid" key of the meta data cloud-init's datasource gave this
// instance ("" when there is none). The bootstrap data is rendered before the infrastructure provider
// knows the host, so a provider that hands data to cloud-init puts the providerID in the instance's
// meta data instead: Yonder's bare-metal config drive carries yonder-metal://<namespace>/<host> there, as
// Metal3's carries it for CAPM3's `{{ ds.meta_data.providerid }}`. cloud-init writes the file at every
// boot, before its final stage (which runs the bootstrap data) and before network-online.target (after
// which the node's boot unit runs).
func cloudInitProviderID(path string) string {
	b, err := os.ReadFile(path) //nolint:gosec // cloud-init's own file, a flag's value
	if err != nil {
		return ""
	}
	var data struct {
		DS struct {
			MetaData map[string]any `json:"meta_data"`
		} `json:"ds"`
	}
	if json.Unmarshal(b, &data) != nil {
		return ""
	}
	id, _ := data.DS.MetaData["providerid"].(string)
	return strings.TrimSpace(id)
}
