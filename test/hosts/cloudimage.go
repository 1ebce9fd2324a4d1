package hosts

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/yonder-dev/yonder/pkg/hostprep"
	"github.com/yonder-dev/yonder/pkg/nspawn"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/osimage"
)

// Cloud-image hosts are what a cloud gives CAPI's infrastructure providers (CAPA, CAPZ, CAPO, CAPV): a
// machine booted from a cloud image whose own cloud-init runs the Machine's bootstrap data, read from the
// cloud's datasource. Here the image is the real one test/osimage builds (Debian's cloud-init and systemd,
// what docs/agent.md asks of a node's host OS), its root filesystem booted by systemd-nspawn --boot in a
// network namespace on the lab network, like the full-OS hosts. The test plays the cloud:
//
//   - the datasource is NoCloud, cloud-init's datasource for data the platform places in the machine's
//     own filesystem (/var/lib/cloud/seed/nocloud): user-data (the bootstrap data as the Machine's Secret
//     holds it) and meta-data (instance-id, local-hostname and, as Metal3's does for CAPM3, providerid);
//   - the network is the cloud's: the namespace's address on the lab network is already up, so the image's
//     own configuration (systemd-networkd leasing by DHCP) and cloud-init's network stage are turned off;
//   - the root filesystem is the machine's disk, so the image's /etc/fstab (its root by UUID) is emptied;
//   - the cgroup hierarchies are writable, as a VM's are: on a cgroup v1 machine systemd-nspawn mounts the
//     controllers read-only, and a unit of the platform's remounts them before cloud-init starts (the step
//     the full-OS hosts and yonder-agent's own node machine take, hostprep.MachinePrepCommand).
//
// A cloud-image host has no sshd: a test reaches it with RunInMachine.

// CloudImageOptions is what the cloud hands the machine it boots.
type CloudImageOptions struct {
	// UserData is cloud-init's user data: the Machine's bootstrap data.
	UserData []byte
	// InstanceID identifies this instance to cloud-init (default: the host's name); a new one makes
	// cloud-init run the data again.
	InstanceID string
	// ProviderID, when set, is meta-data's providerid.
	ProviderID string
	// Files are placed in the image's tree before it boots, owned by root (what the image would carry).
	Files []osimage.File
}

// cloudImageConfig restricts the image's cloud-init to the NoCloud seed (then None, as the image's own
// 90_yonder.cfg does for its config drive) and leaves the network to the platform.
const cloudImageConfig = `# Written by test/hosts: this cloud seeds the instance's data into its filesystem (NoCloud), its
# network is configured before the machine boots, and its root filesystem is a directory, not a disk
# partition to grow.
datasource_list: [ NoCloud, None ]
network:
  config: disabled
resize_rootfs: false
growpart:
  mode: "off"
`

// cloudImageLinks enable the platform's unit and mask what the platform does instead (the network) and what
// a container has no use for (a console getty).
var cloudImageLinks = map[string]string{
	"sysinit.target.wants/platform-prep.service": "/etc/systemd/system/platform-prep.service",
	"systemd-networkd.service":                   "/dev/null",
	"systemd-networkd.socket":                    "/dev/null",
	"systemd-networkd-wait-online.service":       "/dev/null",
	"getty.target":                               "/dev/null",
	"console-getty.service":                      "/dev/null",
}

// StartCloudImage boots a host named name on network n from img's root filesystem, with opts as its
// NoCloud data. It returns once the machine's systemd runs; cloud-init goes on in the background. The host
// is powered off and removed when n is closed.
func StartCloudImage(ctx context.Context, n *labnet.Network, name string, img osimage.Image, opts CloudImageOptions) (*Host, error) {
	h, err := newMachineHost(ctx, n, name)
	if err != nil {
		return nil, err
	}
	h.Port = 0 // no sshd
	if err := img.ExtractRoot(ctx, h.Root); err != nil {
		return nil, fmt.Errorf("cloud-image host %s: %w", name, err)
	}
	if err := writeTree(h.Root, cloudImageFiles(h, opts), cloudImageLinks); err != nil {
		return nil, fmt.Errorf("cloud-image host %s: %w", name, err)
	}
	if err := h.bootMachine(n, nil); err != nil {
		return nil, err
	}
	if err := h.sshd.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) error {
		// initializing, starting, running or degraded: systemd answers on its bus; offline or an error: not yet.
		out, _ := h.RunInMachine(ctx, "systemctl is-system-running")
		switch s := strings.TrimSpace(out); s {
		case "initializing", "starting", "running", "degraded":
			return nil
		default:
			return fmt.Errorf("systemctl is-system-running: %q", s)
		}
	}); err != nil {
		return nil, fmt.Errorf("cloud-image host %s did not start systemd: %w (its console: %s)", name, err, h.sshd.LogPath)
	}
	return h, nil
}

// cloudImageFiles are what the cloud writes into the instance's tree before it boots.
func cloudImageFiles(h *Host, opts CloudImageOptions) map[string]fileSpec {
	id := opts.InstanceID
	if id == "" {
		id = h.Name
	}
	meta := "instance-id: " + id + "\nlocal-hostname: " + h.Name + "\n"
	if opts.ProviderID != "" {
		meta += "providerid: " + opts.ProviderID + "\n"
	}
	files := map[string]fileSpec{
		"etc/cloud/cloud.cfg.d/95_cloud.cfg":   {[]byte(cloudImageConfig), 0o644},
		"var/lib/cloud/seed/nocloud/meta-data": {[]byte(meta), 0o600},
		// The data holds the node's join credentials: root only, as a datasource keeps them.
		"var/lib/cloud/seed/nocloud/user-data": {opts.UserData, 0o600},
		"etc/systemd/system/platform-prep.service": {[]byte(`[Unit]
Description=Make the cgroup hierarchies writable, as a VM's are (the test platform's unit)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target cloud-init-local.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '` + hostprep.MachinePrepCommand + `'
`), 0o644},
		"etc/fstab":       {[]byte("# The instance's root filesystem is mounted by its platform.\n"), 0o644},
		"etc/hosts":       h.etcHosts(),
		"etc/resolv.conf": labResolvConf,
	}
	for _, f := range opts.Files {
		files[strings.TrimPrefix(f.Path, "/")] = fileSpec{f.Content, f.Mode}
	}
	return files
}

// RunInMachine runs cmd with /bin/sh -c inside a full-OS or cloud-image host's machine (its namespaces, as
// root) and returns its combined output: how a test reaches a host without sshd. The programs are the
// machine's own, from its tree, not this machine's.
func (h *Host) RunInMachine(ctx context.Context, cmd string) (string, error) {
	if h.poweroff == nil || h.sshd.Exited() {
		return "", fmt.Errorf("host %s has no running machine", h.Name)
	}
	pid := leaderPID(h)
	if pid == 0 {
		return "", fmt.Errorf("host %s: its machine's init is not running yet", h.Name)
	}
	out, err := nspawn.Exec(ctx, pid, "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
		"/bin/sh", "-c", cmd)
	if err != nil {
		return string(out), fmt.Errorf("%q on host %s: %w: %s", cmd, h.Name, err, out)
	}
	return string(out), nil
}

// leaderPID is the PID of the host machine's init as this machine sees it, 0 when it has none yet.
func leaderPID(h *Host) int { return nspawn.Leader(h.sshd.Pid()) }
