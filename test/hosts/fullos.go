package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/yonder-dev/yonder/pkg/hostprep"
	"github.com/yonder-dev/yonder/pkg/nspawn"
	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Full-OS hosts are what CAPI's kubeadm providers (and BYOH, k0smotron, CAPM3 users) expect a machine to be:
// systemd as PID 1, OpenSSH as a systemd unit, containerd running, and a kubelet unit that waits, as the
// kubeadm packages install it, for `kubeadm init` or `kubeadm join` to write its configuration. Each is a
// Debian bookworm tree (hack/test-bins.sh --fullos-rootfs) booted by systemd-nspawn --boot in its own
// network namespace on the lab network, with the same launch settings as yonder-agent's node machine
// (package nspawn), in a cgroup subtree of its own. containerd, runc's shim, kubelet and kubeadm are the
// binaries hack/test-bins.sh builds, bound read-only into /usr/local/bin as a package would install them.
//
// A full-OS host is a *Host like the netns hosts: tests reach it over SSH with its pinned host key, as
// root, with the client key it authorizes. Unlike a netns host it has its own filesystem (a copy of the
// tree), its own PID 1 and its own mount table; Stop powers it off.

// FullOSOptions tunes the full-OS hosts StartFullOS creates.
type FullOSOptions struct {
	// ClientKeyPEM, when set, is authorized instead of a fresh key (several hosts sharing one credential).
	ClientKeyPEM []byte
	// RegistryMirrors maps a registry host (registry.k8s.io) to the endpoint that serves its images
	// (http://10.0.0.1:5000): containerd's hosts.toml, the way an air-gapped site points its nodes at a mirror.
	RegistryMirrors map[string]string
	// BootTimeout bounds the wait for the host's sshd to accept connections (default 3 minutes: a boot
	// under a loaded 2-core machine).
	BootTimeout time.Duration
}

// FullOSSandboxImage is the pause image the hosts' containerd runs pod sandboxes with: the one kubeadm of
// the tested version names (`kubeadm config images list`), so its preflight finds them agreeing.
const FullOSSandboxImage = "registry.k8s.io/pause:3.10.2"

// FullOSBinaries are the test binaries a full-OS host has in /usr/local/bin.
var FullOSBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kubeadm"}

// StartFullOS boots count full-OS hosts named <prefix>-<i> on network n, in parallel. They are powered off
// and removed when n is closed.
func StartFullOS(ctx context.Context, n *labnet.Network, prefix string, count int, opts FullOSOptions) ([]*Host, error) {
	archive, err := FullOSRootfs()
	if err != nil {
		return nil, err
	}
	binds := make([]string, 0, len(FullOSBinaries))
	for _, b := range FullOSBinaries {
		p, err := testbins.Path(b)
		if err != nil {
			return nil, err
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			return nil, fmt.Errorf("full-OS hosts: %w", err)
		}
		binds = append(binds, p+":/usr/local/bin/"+b)
	}
	hosts := make([]*Host, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hosts[i], errs[i] = bootFullOS(ctx, n, fmt.Sprintf("%s-%d", prefix, i), archive, binds, opts)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	timeout := opts.BootTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	for _, h := range hosts {
		if err := h.sshd.WaitFor(ctx, timeout, h.acceptsSSH); err != nil {
			return nil, fmt.Errorf("full-OS host %s did not accept SSH: %w (its console: %s)", h.Name, err, h.sshd.LogPath)
		}
	}
	return hosts, nil
}

// FullOSRootfs returns the full-OS tree's archive: YONDER_TEST_FULLOS_ROOTFS, or the cached one that
// hack/test-bins.sh builds (once).
func FullOSRootfs() (string, error) {
	if p := os.Getenv("YONDER_TEST_FULLOS_ROOTFS"); p != "" {
		return p, nil
	}
	p, err := testbins.Artifact("--fullos-rootfs")
	if err != nil {
		return "", fmt.Errorf("cannot build the full-OS rootfs: %w", err)
	}
	return p, nil
}

func bootFullOS(ctx context.Context, n *labnet.Network, name, archive string, binds []string, opts FullOSOptions) (*Host, error) {
	h, err := newMachineHost(ctx, n, name)
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "tar", "--zstd", "-xpf", archive, "-C", h.Root, "--numeric-owner").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("failed to unpack %s for full-OS host %s: %s: %w", archive, name, out, err)
	}
	hostKeyPEM, hostSigner, err := newKey("host " + name)
	if err != nil {
		return nil, err
	}
	h.HostKey = hostSigner.PublicKey()
	if h.ClientKeyPEM = opts.ClientKeyPEM; h.ClientKeyPEM == nil {
		if h.ClientKeyPEM, _, err = newKey("client of " + name); err != nil {
			return nil, err
		}
	}
	if h.ClientSigner, err = ssh.ParsePrivateKey(h.ClientKeyPEM); err != nil {
		return nil, fmt.Errorf("failed to parse client key for host %s: %w", name, err)
	}
	files := fullOSFiles(h, hostKeyPEM, CgroupV2(), opts.RegistryMirrors)
	files["etc/ssh/ssh_host_ed25519_key.pub"] = fileSpec{ssh.MarshalAuthorizedKey(h.HostKey), 0o644}
	if err := writeTree(h.Root, files, fullOSUnitLinks); err != nil {
		return nil, fmt.Errorf("full-OS host %s: %w", name, err)
	}
	if err := h.bootMachine(n, binds); err != nil {
		return nil, err
	}
	return h, nil
}

// newMachineHost attaches a host named name to n and gives it an empty directory for its machine's tree
// (h.Root), removed when n is closed.
func newMachineHost(ctx context.Context, n *labnet.Network, name string) (*Host, error) {
	att, err := n.Attach(ctx, name)
	if err != nil {
		return nil, err
	}
	// Named after the namespace, which is unique to this holder of the lab network's slot: concurrent test
	// processes never share a machine name, a cgroup subtree or a tree, and the next holder of the slot
	// removes what a killed one left (its processes go with the namespace, labnet.DeleteNamespace).
	id := "yonder-fullos-" + att.Namespace
	dir := filepath.Join(os.TempDir(), id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("failed to remove the leftover tree of host %s: %w", name, err)
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil { //nolint:gosec // the machine's root directory
		return nil, fmt.Errorf("failed to create host directory: %w", err)
	}
	n.OnClose(func() error { return os.RemoveAll(dir) })
	return &Host{Name: name, Namespace: att.Namespace, NamespacePath: att.NamespacePath, Address: att.Address, Port: 22, User: "root",
		Dir: dir, Root: root, machineID: id}, nil
}

// writeTree writes files into the tree at root and makes the unit links (relative to etc/systemd/system),
// as `systemctl enable` or `mask` would.
func writeTree(root string, files map[string]fileSpec, links map[string]string) error {
	for rel, f := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories of the machine's tree
			return err
		}
		_ = os.Remove(p) // a symlink in the tree (/etc/resolv.conf) must not redirect the write
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return fmt.Errorf("failed to write %s: %w", rel, err)
		}
	}
	for link, target := range links {
		p := filepath.Join(root, "etc/systemd/system", link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories of the machine's tree
			return err
		}
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			return fmt.Errorf("failed to link unit %s: %w", link, err)
		}
	}
	return nil
}

// bootMachine boots the tree at h.Root with systemd-nspawn --boot in h's network namespace, binds bound
// read-only, in a cgroup subtree of its own. The machine is powered off when n is closed.
func (h *Host) bootMachine(n *labnet.Network, binds []string) error {
	id := h.machineID
	cfg := nspawn.Config{Name: id, Rootfs: h.Root, NetworkNamespacePath: h.NamespacePath,
		ReadOnlyBinds: binds}
	if st, err := os.Stat("/lib/modules"); err == nil && st.IsDir() {
		// kubeadm's preflight reads the kernel's modules and configuration, as on any host.
		cfg.ReadOnlyBinds = append(cfg.ReadOnlyBinds, "/lib/modules")
	}
	// The kubelet sets a few kernel tunables at start and fails when it cannot; /proc/sys is read-only in
	// the machine and the kernel is this machine's, so the host takes part in the agents' registry as a node
	// does (package hostprep): the last holder to leave restores the machine's own values.
	reg := hostprep.Registry{}
	if _, _, err := reg.Acquire(id, hostprep.KubeletSysctls); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	n.OnClose(func() error { _, _, err := reg.Release(id); return err })
	cg := nspawn.Cgroups{Name: cfg.Name}
	if cg.Exists() {
		if err := cg.KillAndRemove(10 * time.Second); err != nil {
			return fmt.Errorf("failed to remove the leftover cgroups of host %s: %w", h.Name, err)
		}
	}
	paths, err := cg.Create()
	if err != nil {
		return fmt.Errorf("host %s needs a cgroup subtree of its own: %w", h.Name, err)
	}
	n.OnClose(func() error { return cg.KillAndRemove(10 * time.Second) })
	bin, err := proc.LookPath("systemd-nspawn")
	if err != nil {
		return fmt.Errorf("systemd-nspawn is missing: run `hack/test-bins.sh --packages` (installs systemd-container): %w", err)
	}
	// The machine's console (its boot messages) is the process's log: the place to look when it fails.
	if h.sshd, err = proc.Start("console", h.Dir, nspawn.Env, "/bin/sh", cfg.DirectLaunch(bin, paths)...); err != nil {
		return err
	}
	// Stop (and the network's close) powers the machine off: systemd-nspawn's SIGTERM shuts it down in order;
	// whatever is left in its cgroup subtree is killed, and the host leaves the sysctl registry.
	h.poweroff = func() error {
		return errors.Join(h.sshd.Stop(30*time.Second), cg.KillAndRemove(10*time.Second), func() error { _, _, err := reg.Release(id); return err }())
	}
	n.OnClose(h.poweroff)
	return nil
}

// InitCgroups returns the cgroup of a full-OS host's init (systemd, PID 1 in the machine) in each
// hierarchy, as this machine sees it: "hierarchy-id:controllers" to path, from /proc/<pid>/cgroup. Nil for
// a netns host or one whose machine is not running.
func (h *Host) InitCgroups() map[string]string {
	if h.poweroff == nil || h.sshd.Exited() {
		return nil
	}
	pid := nspawn.Leader(h.sshd.Pid())
	if pid == 0 {
		return nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if i := strings.LastIndex(l, ":"); i > 0 {
			out[l[:i]] = l[i+1:]
		}
	}
	return out
}

// fileSpec is one file written into a full-OS host's tree.
type fileSpec struct {
	data []byte
	mode os.FileMode
}

// fullOSUnitLinks enable the units, as `systemctl enable` would.
var fullOSUnitLinks = map[string]string{
	"multi-user.target.wants/host-prep.service":  "/etc/systemd/system/host-prep.service",
	"multi-user.target.wants/containerd.service": "/etc/systemd/system/containerd.service",
	"multi-user.target.wants/kubelet.service":    "/etc/systemd/system/kubelet.service",
	"multi-user.target.wants/ssh.service":        "/lib/systemd/system/ssh.service",
	// A container has no hardware to wait for, and nothing on the host needs these.
	"getty.target":                         "/dev/null",
	"console-getty.service":                "/dev/null",
	"systemd-networkd-wait-online.service": "/dev/null",
}

// kubeletDropInDir is the kubelet's drop-in configuration directory on a full-OS host.
const kubeletDropInDir = "/etc/kubelet.conf.d"

// fullOSKubeletConfiguration is what the kubelets of this test machine's full-OS hosts need, in a drop-in
// of their own (kubeletDropInDir), whatever cluster they join: where the machine has cgroup v1 (v2 false),
// the cgroupfs driver with cgroup v1 allowed (a kubelet inside nspawn on a v1 host, docs/compatibility.md);
// everywhere, swap tolerated and eviction thresholds near zero (the hosts share the machine's disk, whose
// fill level is not theirs to judge).
func fullOSKubeletConfiguration(v2 bool) string {
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailSwapOn: false\n")
	b.WriteString("evictionHard:\n  memory.available: 1Mi\n  nodefs.available: 1%\n  nodefs.inodesFree: 1%\n  imagefs.available: 1%\n")
	b.WriteString("imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n")
	if !v2 {
		b.WriteString("cgroupDriver: cgroupfs\nfailCgroupV1: false\n")
	}
	return b.String()
}

// etcHosts names the host by its lab network address, with the loopback names every Debian has.
func (h *Host) etcHosts() fileSpec {
	return fileSpec{[]byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + h.Address.String() + "\t" + h.Name + "\n"), 0o644}
}

// labResolvConf is a machine host's resolv.conf: the lab network has no DNS server.
var labResolvConf = fileSpec{[]byte("# The lab network has no DNS server; names resolve through /etc/hosts.\n"), 0o644}

// The texts below are what a host that kubeadm accepts carries: the full-OS hosts here, and the bare-metal
// e2e's node image (test/kubeadm.NodeImage), which writes the same bytes into a cloud image so both kinds
// of host run containerd and the kubelet the same way.

// containerdUnitHead, containerdUnitAfter and containerdUnitService make up containerd's unit as
// containerd's repository ships it (containerd.service), started from /usr/local/bin. They are split at
// the After= line because a full-OS host also orders containerd after its host-prep.service, which only
// a container needs.
const (
	containerdUnitHead = `[Unit]
Description=containerd container runtime
`
	containerdUnitAfter   = "After=network.target local-fs.target"
	containerdUnitService = `
[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`
)

// ContainerdUnit is containerd's systemd unit (/etc/systemd/system/containerd.service) for a machine
// with containerd in /usr/local/bin.
const ContainerdUnit = containerdUnitHead + containerdUnitAfter + "\n" + containerdUnitService

// KubeletUnit is the kubelet's systemd unit (/etc/systemd/system/kubelet.service) as the kubeadm packages
// install it, for a kubelet in /usr/local/bin: without KubeadmKubeletDropIn the kubelet has no
// configuration, and until kubeadm writes one it fails and systemd restarts it every 10 s, forever.
const KubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/local/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// KubeadmKubeletDropIn is the kubelet unit's drop-in the kubeadm packages install
// (/etc/systemd/system/kubelet.service.d/10-kubeadm.conf): it runs the kubelet with the bootstrap
// kubeconfig, the configuration and the flags that `kubeadm init` or `kubeadm join` write.
const KubeadmKubeletDropIn = `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// ContainerdConfig is containerd's /etc/containerd/config.toml for a kubeadm node: the CRI plugin with
// FullOSSandboxImage as the pod sandbox (pinned, so image garbage collection never removes the preloaded
// copy), registry mirrors read from /etc/containerd/certs.d, Debian's CNI plugins, and runc with the
// systemd cgroup driver when systemdCgroup is set (it must match the kubelet's cgroupDriver; kubeadm's
// default is systemd). restrict_oom_score_adj is what a container without CAP_SYS_RESOURCE needs; on a
// machine it only keeps containers from getting an oom_score_adj below containerd's own.
func ContainerdConfig(systemdCgroup bool) string {
	return `version = 3

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "` + FullOSSandboxImage + `"

[plugins."io.containerd.cri.v1.runtime"]
  # The container has no CAP_SYS_RESOURCE to lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    # Debian's containernetworking-plugins.
    bin_dirs = ["/usr/lib/cni", "/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    SystemdCgroup = ` + strconv.FormatBool(systemdCgroup) + `
`
}

// BridgeConflist is a CNI network configuration (/etc/cni/net.d/10-bridge.conflist) for a node whose pods
// need no network beyond the node: Debian's bridge plugin with a gateway on the bridge cni0 and
// masquerading, host-local addresses from subnet (CIDR notation), portmap and loopback. Nodes with it have
// no routes to each other's pods; each node needs a subnet of its own within its cluster.
func BridgeConflist(name, subnet string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, name, subnet)
}

// fullOSFiles is what a host's tree gets on top of the archive: its identity (hostname, host key, the
// authorized client key), sshd's settings, containerd's configuration, and the kubelet unit with the drop-in
// the kubeadm packages install (the kubelet restarts until kubeadm writes its configuration).
func fullOSFiles(h *Host, hostKeyPEM []byte, v2 bool, mirrors map[string]string) map[string]fileSpec {
	f := map[string]fileSpec{
		"etc/hostname":                 {[]byte(h.Name + "\n"), 0o644},
		"etc/hosts":                    h.etcHosts(),
		"etc/resolv.conf":              labResolvConf,
		"etc/machine-id":               {nil, 0o444}, // generated at boot: every host its own
		"etc/ssh/ssh_host_ed25519_key": {hostKeyPEM, 0o600},
		"root/.ssh/authorized_keys":    {ssh.MarshalAuthorizedKey(h.ClientSigner.PublicKey()), 0o600},
		"etc/ssh/sshd_config.d/yonder.conf": {[]byte("# Yonder test host " + h.Name + ": the host key the harness pinned, keys only.\n" +
			"HostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n"), 0o644},
		// nspawn mounts the cgroup v1 controllers read-only; the kubelet and runc need them writable, and
		// /dev/kmsg present: the same step as yonder-agent's node machine (hostprep.MachinePrepCommand).
		"etc/systemd/system/host-prep.service": {[]byte(`[Unit]
Description=Prepare the container for containerd and the kubelet
DefaultDependencies=no
After=local-fs.target
Before=containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '` + hostprep.MachinePrepCommand + `'
# What kubeadm's install guide has a host set in sysctl.d; systemd-sysctl skips a container's read-only
# /proc/sys, but the network namespace's own settings are writable.
ExecStart=/bin/sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'

[Install]
WantedBy=multi-user.target
`), 0o644},
		// host-prep.service makes the container's cgroups writable before containerd starts.
		"etc/systemd/system/containerd.service": {[]byte(containerdUnitHead + containerdUnitAfter + " host-prep.service\n" + containerdUnitService), 0o644},
		// On a cgroup v1 machine the kubelet inside nspawn needs the cgroupfs driver (docs/agent.md measured
		// why); where the machine has cgroup v2, systemd's, which is kubeadm's default.
		"etc/containerd/config.toml": {[]byte(ContainerdConfig(v2)), 0o644},
		// As the kubeadm packages install them: kubelet.service and its kubeadm drop-in.
		"etc/systemd/system/kubelet.service":                   {[]byte(KubeletUnit), 0o644},
		"etc/systemd/system/kubelet.service.d/10-kubeadm.conf": {[]byte(KubeadmKubeletDropIn), 0o644},
		// What this machine needs of every kubelet, whichever cluster's configuration kubeadm writes: a
		// host's own setting, kept outside what kubeadm writes and `kubeadm reset` removes, as the kubelet's
		// drop-in directory (--config-dir) allows. It overrides kubeadm's config.yaml.
		"etc/systemd/system/kubelet.service.d/20-machine.conf": {[]byte(`[Service]
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --config-dir=` + kubeletDropInDir + `"
`), 0o644},
		kubeletDropInDir[1:] + "/50-machine.conf": {[]byte(fullOSKubeletConfiguration(v2)), 0o644},
	}
	// Pods need a network before the Node is Ready. A CNI add-on would configure one; each host has a
	// bridge of its own with a /24 named after its address (no routes between hosts: a pod reaches the
	// lab network through the host's masquerade).
	a := h.Address.As4()
	f["etc/cni/net.d/10-bridge.conflist"] = fileSpec{[]byte(BridgeConflist("fullos", fmt.Sprintf("10.244.%d.0/24", a[3]))), 0o644}
	for registry, endpoint := range mirrors {
		f["etc/containerd/certs.d/"+registry+"/hosts.toml"] = fileSpec{[]byte(fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+registry, endpoint)), 0o644}
	}
	return f
}

// CgroupV2 reports whether the machine runs the unified cgroup hierarchy only (the full-OS hosts share the
// machine's kernel, so theirs too).
func CgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}
