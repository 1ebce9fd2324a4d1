package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/yonder-dev/yonder/hostruntime/internal/state"
	"github.com/yonder-dev/yonder/pkg/nspawn"
)

// bpffsMountPoint is where the kernel offers the BPF filesystem's mount point.
const bpffsMountPoint = "/sys/fs/bpf"

func (r *run) nspawnConfig() nspawn.Config {
	c := nspawn.Config{
		Name:                 r.o.MachineName,
		Rootfs:               r.o.rootfsDir(),
		NetworkNamespacePath: r.o.NetworkNamespacePath,
		LogFile:              filepath.Join(r.o.logDir(), "machine-"+r.o.MachineName+".log"),
	}
	// On an overlay root containerd's snapshots need a directory of the host's own filesystem.
	if m := r.o.machineRoot(); m.Overlaid() {
		c.Binds = append(c.Binds, m.ContainerdDir()+":/var/lib/containerd")
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
	r.launched = r.o.Now()
	pid, unit, err := c.Start(ctx, paths)
	if err != nil {
		return "", withHint(err, "see "+c.LogFile)
	}
	r.st.Machine = &state.Machine{Name: c.Name, Base: r.o.baseMachine, Rootfs: c.Rootfs, LauncherPID: pid, Unit: unit, ConfigDigest: digest, StartedAt: r.o.Now()}
	if r.gpu != nil {
		r.st.Machine.DeviceNodes = slices.Clone(r.gpu.DeviceNodes)
	}
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

func nspawnCgroups(o *Options) nspawn.Cgroups { return nspawn.Cgroups{Name: o.CgroupName} }
