package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/yonder-dev/yonder/hostruntime/internal/bootunit"
	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/preflight"
	"github.com/yonder-dev/yonder/hostruntime/internal/render"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
	"github.com/yonder-dev/yonder/pkg/nspawn"
)

// Status is the machine-readable state of this host's node.
type Status struct {
	NodeName string                        `json:"nodeName,omitempty"`
	Phases   map[string]*state.PhaseRecord `json:"phases,omitempty"`
	// Bootstrapped is true once the sentinel is written.
	Bootstrapped bool              `json:"bootstrapped"`
	Machine      *MachineStatus    `json:"machine,omitempty"`
	Node         *NodeStatus       `json:"node,omitempty"`
	GPU          map[string]string `json:"gpu,omitempty"`
	// SysctlsSaved are the host originals reset will restore.
	SysctlsSaved map[string]string `json:"sysctlsSaved,omitempty"`
	// BootUnit is the unit that starts the node again when the host boots (hosts with systemd as PID 1).
	BootUnit *bootunit.Status `json:"bootUnit,omitempty"`
}

// MachineStatus describes the nspawn machine.
type MachineStatus struct {
	Name        string `json:"name"`
	Rootfs      string `json:"rootfs"`
	Running     bool   `json:"running"`
	LauncherPID int    `json:"launcherPID,omitempty"`
	LeaderPID   int    `json:"leaderPID,omitempty"`
	Unit        string `json:"unit,omitempty"`
}

// NodeStatus is what the API server says about the Node (queried with the kubelet's own credentials).
type NodeStatus struct {
	Registered bool   `json:"registered"`
	Ready      bool   `json:"ready"`
	ProviderID string `json:"providerID,omitempty"`
	PodCIDR    string `json:"podCIDR,omitempty"`
	Error      string `json:"error,omitempty"`
}

// GetStatus reports the recorded state and what is live.
func GetStatus(ctx context.Context, o Options) (*Status, error) {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	st, err := state.Store{Dir: o.StateDir}.Load()
	if err != nil {
		return nil, err
	}
	if st.Machine != nil && (o.MachineName == "" || o.MachineName == st.Machine.Base) {
		o.MachineName = st.Machine.Name // the active blue/green slot
	}
	if err := o.defaults(st.NodeName); err != nil {
		return nil, err
	}
	s := &Status{NodeName: st.NodeName, Phases: st.Phases, GPU: st.GPU, SysctlsSaved: st.Sysctls}
	s.Bootstrapped = st.Sentinel != "" && fileExists(st.Sentinel)
	if o.MachineName != "" {
		c := nspawn.Config{Name: o.MachineName}
		m := &MachineStatus{Name: o.MachineName, Rootfs: o.rootfsDir(), LauncherPID: c.Running()}
		m.Running = m.LauncherPID != 0
		if m.Running {
			m.LeaderPID = nspawn.Leader(m.LauncherPID)
		}
		if st.Machine != nil {
			m.Unit = st.Machine.Unit
		}
		s.Machine = m
	}
	s.BootUnit = bootUnitStatus(ctx, o, st)
	cfg, cfgErr := LoadConfig(o.ConfigPath)
	cert := inRoot(o.rootfsDir(), render.KubeletClientCert)
	if cfgErr == nil && st.NodeName != "" && fileExists(cert) {
		ns := &NodeStatus{}
		cs, err := kubeletClient(cfg.APIServer.Endpoint, cfg.APIServer.CACertificate, o.rootfsDir())
		if err == nil {
			var n *corev1.Node
			n, err = cs.CoreV1().Nodes().Get(ctx, st.NodeName, metav1.GetOptions{})
			if err == nil {
				ns.Registered, ns.ProviderID, ns.PodCIDR = true, n.Spec.ProviderID, n.Spec.PodCIDR
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ns.Ready = true
					}
				}
			}
		}
		if err != nil {
			ns.Error = err.Error()
		}
		s.Node = ns
	}
	return s, nil
}

// bootUnitStatus reports the node's boot unit where systemd is PID 1 or its file is there; nil otherwise.
func bootUnitStatus(ctx context.Context, o Options, st *state.State) *bootunit.Status {
	base := o.baseMachine
	if st.Machine != nil && st.Machine.Base != "" {
		base = st.Machine.Base // o names the active slot
	}
	if base == "" {
		return nil
	}
	b := o.BootUnits.Get(ctx, base)
	if !b.Installed && b.Enabled == "" {
		return nil
	}
	return &b
}

// Preflight runs the host checks alone (no changes) and returns the report.
func Preflight(o Options) *preflight.Report {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	in := preflight.Input{StateDir: o.StateDir, MinFreeBytes: 2 << 30, Tools: []string{"systemd-nspawn", "tar", "nsenter"}, Ports: []int{10250}, BridgeNetfilter: true}
	if _, err := os.Stat(filepath.Join(o.StateDir, state.FileName)); err == nil {
		in.Ports = nil // a node may already run here; its kubelet owns the port
	}
	rep := preflight.Run(in)
	rep.Checks = append(rep.Checks, gpuCheck(o))
	return rep
}

// gpuCheck reports the GPUs a node here would use and those it would leave out, so an operator sees
// before a bootstrap what gpu.mode Auto labels and binds. A GPU without its vendor's compute driver is a
// warning, not a failure: the host still runs a node, without that GPU.
func gpuCheck(o Options) preflight.Check {
	c := preflight.Check{Name: "gpu", Severity: preflight.OK}
	res, err := gpu.Detect(gpu.Roots{Sys: o.SysRoot, Dev: o.DevRoot, Proc: o.ProcRoot})
	if err != nil {
		c.Severity, c.Message, c.Fix = preflight.Warn, err.Error(), "check that sysfs is mounted at /sys"
		return c
	}
	var used, left []string
	for _, d := range res.Devices {
		used = append(used, strings.TrimSpace(d.Address+" "+d.Vendor+" "+d.Model))
	}
	for _, d := range res.Unusable {
		left = append(left, d.Address+" "+d.Vendor+" ("+d.BoundTo()+")")
	}
	var parts []string
	if len(used) > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU(s) for the node: %s", len(used), strings.Join(used, ", ")))
	}
	if len(left) > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU(s) without their compute driver, left out: %s", len(left), strings.Join(left, ", ")))
		c.Severity = preflight.Warn
		c.Fix = "load the vendor's driver (nvidia, amdgpu) for the GPUs the node should use; lspci -k shows the driver in use"
	}
	if len(parts) == 0 {
		parts = append(parts, "no NVIDIA or AMD GPU")
	}
	c.Message = strings.Join(parts, "; ")
	return c
}
