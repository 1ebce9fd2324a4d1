// Package agent runs yonder-agent's phases: preflight, host preparation, artifacts, rootfs, machine
// configuration, the nspawn machine, the kubelet's join, and the bootstrap-success sentinel; plus status
// and reset. Every phase is idempotent and records its result in the state directory, so re-running
// converges and a crash in the middle of a phase is recovered by running it again.
//
// Everything the agent touches on the host is rooted at configurable paths and names (state directory,
// machine name, cgroup subtree, sentinel), so several agents can run side by side on one machine (tests,
// two network-namespace hosts).
package agent

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/bootunit"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
	"github.com/yonder-dev/yonder/pkg/hostprep"
	"github.com/yonder-dev/yonder/pkg/nspawn"
)

// Defaults of the agent-side settings (command-line flags; not part of the AgentConfig file).
const (
	DefaultStateDir       = "/var/lib/yonder"
	DefaultSentinel       = "/run/cluster-api/bootstrap-success.complete"
	DefaultProviderIDFile = "/etc/yonder/provider-id"
	// DefaultCloudInitInstanceData is where cloud-init writes what its datasource said about the instance.
	DefaultCloudInitInstanceData = "/run/cloud-init/instance-data.json"
	DefaultReadyTimeout          = 5 * time.Minute
	DefaultSandboxImage          = "registry.k8s.io/pause:3.10"
)

// Options are the agent-side settings: where things live on this host. They are flags of yonder-agent,
// not AgentConfig fields, because they describe the host, not the node (docs/agent.md).
type Options struct {
	// ConfigPath is the AgentConfig file.
	ConfigPath string
	// StateDir holds state.json, the artifact cache, machines and logs.
	StateDir string
	// MachineName names the nspawn machine (default yonder-<nodeName>).
	MachineName string
	// CgroupName names the machine's cgroup subtree (default: MachineName).
	CgroupName string
	// SentinelPath is written when the Node is Ready.
	SentinelPath string
	// ProviderIDFile is read when the AgentConfig has no providerID.
	ProviderIDFile string
	// CloudInitInstanceData is cloud-init's instance data, read when neither the AgentConfig nor
	// ProviderIDFile names a providerID: the datasource's meta data key "providerid" (what Metal3's and
	// Yonder's config drives carry) is the node's providerID.
	CloudInitInstanceData string
	// NetworkNamespacePath places the machine in that network namespace (default: the agent's own).
	NetworkNamespacePath string
	// PodCIDR overrides the Node's spec.podCIDR for the CNI config (clusters that do not allocate them).
	PodCIDR string
	// SandboxImage is the pause image name the CRI uses (must match an imported image).
	SandboxImage string
	// NodeLeaseDurationSeconds is the kubelet's lease duration (0: kubelet's default).
	NodeLeaseDurationSeconds int
	// ReadyTimeout bounds the wait for the Node to become Ready.
	ReadyTimeout time.Duration
	// StopGrace bounds a clean machine shutdown before it is killed.
	StopGrace time.Duration
	// SysctlRegistry is where nodes on this host coordinate host-global sysctls (default /run/yonder/sysctls).
	SysctlRegistry string
	// SysctlRoot, SysRoot, DevRoot, ProcRoot re-root /proc/sys, /sys, /dev and /proc (tests).
	SysctlRoot, SysRoot, DevRoot, ProcRoot string
	// KeepCache makes reset keep the artifact and rootfs caches.
	KeepCache bool
	// Log receives human-readable progress (default stderr); it is also written to <state>/agent.log.
	Log io.Writer
	// JournalSocket is journald's socket (default /run/systemd/journal/socket); logs also go there when it exists.
	JournalSocket string
	// Now is the clock (tests).
	Now func() time.Time
	// BootUnits installs the unit that starts the node again when the host boots (default: in
	// /etc/systemd/system with the host's systemctl, where systemd is PID 1); tests replace it.
	BootUnits bootunit.Manager
	// AgentPath is the agent binary the boot unit runs (default: this executable).
	AgentPath string

	// baseMachine and baseCgroup are the names before a blue/green slot is applied.
	baseMachine, baseCgroup string
	// stopped is set by stopMachine.
	stopped bool
}

// GreenSuffix names the second blue/green slot of a machine (upgrade alternates between the two).
const GreenSuffix = "-g"

// slots are the machine names of both blue/green slots.
func (o *Options) slots() []string { return []string{o.baseMachine, o.baseMachine + GreenSuffix} }

// useSlot points the options at one slot (machine, cgroup subtree, rootfs).
func (o *Options) useSlot(machine string) {
	o.MachineName = machine
	o.CgroupName = o.baseCgroup + strings.TrimPrefix(machine, o.baseMachine)
}

// otherSlot is the slot that is not machine.
func (o *Options) otherSlot(machine string) string {
	if machine == o.baseMachine {
		return o.baseMachine + GreenSuffix
	}
	return o.baseMachine
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// defaults fills unset options; nodeName may be "" when no config is available (reset).
func (o *Options) defaults(nodeName string) error {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.ConfigPath == "" {
		o.ConfigPath = agentv1.DefaultPath
	}
	if o.MachineName == "" && nodeName != "" {
		o.MachineName = defaultMachineName(nodeName)
	}
	if o.CgroupName == "" {
		o.CgroupName = o.MachineName
	}
	if o.MachineName != "" && !nameRE.MatchString(o.MachineName) {
		return fmt.Errorf("machine name %q is invalid: use lowercase letters, digits and dashes (max 63)", o.MachineName)
	}
	if o.CgroupName != "" && !nameRE.MatchString(o.CgroupName) {
		return fmt.Errorf("cgroup name %q is invalid: use lowercase letters, digits and dashes (max 63)", o.CgroupName)
	}
	if o.baseMachine == "" {
		o.baseMachine, o.baseCgroup = o.MachineName, o.CgroupName
	}
	if o.SentinelPath == "" {
		o.SentinelPath = DefaultSentinel
	}
	if o.ProviderIDFile == "" {
		o.ProviderIDFile = DefaultProviderIDFile
	}
	if o.CloudInitInstanceData == "" {
		o.CloudInitInstanceData = DefaultCloudInitInstanceData
	}
	if o.SandboxImage == "" {
		o.SandboxImage = DefaultSandboxImage
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.StopGrace == 0 {
		o.StopGrace = 20 * time.Second
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BootUnits.Systemd == nil {
		o.BootUnits.Systemd = nspawn.SystemdIsPID1
	}
	return nil
}

// defaultMachineName is the machine name of Node nodeName when --machine-name is not given.
func defaultMachineName(nodeName string) string {
	n := "yonder-" + strings.ReplaceAll(nodeName, ".", "-")
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.TrimRight(n, "-")
}

func (o *Options) sysctlRegistry() hostprep.Registry {
	return hostprep.Registry{Dir: o.SysctlRegistry, Sysctls: hostprep.Sysctls{Root: o.SysctlRoot}}
}

func (o *Options) machinesDir() string { return filepath.Join(o.StateDir, "machines") }
func (o *Options) rootfsDir() string   { return filepath.Join(o.machinesDir(), o.MachineName) }
func (o *Options) cacheDir() string    { return filepath.Join(o.StateDir, "cache") }

// machineRoot is the slot's root directory and its data beside it (package rootfs).
func (o *Options) machineRoot() rootfs.Machine { return rootfs.NewMachine(o.rootfsDir()) }

// rootfsTreeDir is where the tree of that digest is unpacked, once, for every machine on the host. The
// digest's algorithm is joined with a dash: a colon would split an overlay's lowerdir option.
func (o *Options) rootfsTreeDir(digest string) string {
	return filepath.Join(o.cacheDir(), "rootfs", "trees", strings.ReplaceAll(digest, ":", "-"))
}
func (o *Options) logDir() string { return filepath.Join(o.StateDir, "log") }

func (o *Options) logger() (*slog.Logger, func()) {
	_ = os.MkdirAll(o.logDir(), 0o700)
	writers := []io.Writer{o.Log}
	var closers []io.Closer
	if f, err := os.OpenFile(filepath.Join(o.logDir(), "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		writers, closers = append(writers, f), append(closers, f)
	}
	sock := o.JournalSocket
	if sock == "" {
		sock = DefaultJournalSocket
	}
	if j := newJournalWriter(sock); j != nil {
		writers, closers = append(writers, j), append(closers, j)
	}
	return slog.New(slog.NewTextHandler(io.MultiWriter(writers...), nil)), func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
}
