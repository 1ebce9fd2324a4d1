// Package nspawn runs a systemd-nspawn machine booted with systemd as its init: its launch configuration,
// its own cgroup subtree, and its life cycle. yonder-agent runs the node's machine with it; the tests' full-OS
// hosts (test/hosts) are such machines too, configured the way the node's is measured to need. On a host whose PID 1 is systemd the machine runs as a transient unit
// (registered with machined when present); elsewhere the agent launches systemd-nspawn directly with
// --register=no --keep-unit, detached, from the machine's cgroup subtree. Which one is detected, not
// configured.
package nspawn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config is one machine's launch configuration.
type Config struct {
	// Name of the machine and of its cgroup subtree.
	Name string
	// Rootfs is the machine's root directory.
	Rootfs string
	// NetworkNamespacePath places the machine in that network namespace; empty shares the agent's.
	NetworkNamespacePath string
	// DeviceBinds are host device paths bound read-write into the machine (GPUs).
	DeviceBinds []string
	// Binds are extra host:machine read-write binds.
	Binds []string
	// ReadOnlyBinds are extra host[:machine] read-only binds (the host's kernel modules).
	ReadOnlyBinds []string
	// LogFile receives systemd-nspawn's own output (direct launch).
	LogFile string
	// Nspawn is the systemd-nspawn binary (default: from PATH).
	Nspawn string
}

// Env is the environment systemd-nspawn needs here: /proc/sys/net writable (the CNI bridge plugin sets
// ip_forward) and no seccomp filter of its own (the kubelet's containers need the full syscall set).
var Env = []string{"SYSTEMD_NSPAWN_API_VFS_WRITABLE=network", "SYSTEMD_SECCOMP=0"}

// Args is the systemd-nspawn command line.
func (c Config) Args(registered bool) []string {
	args := []string{
		"--boot",
		"--directory=" + c.Rootfs,
		"--machine=" + c.Name,
		"--keep-unit",
		"--link-journal=no",
		"--capability=all",
		"--system-call-filter=@keyring bpf",
		"--bind-ro=/dev/kmsg",
		"--resolv-conf=off",
		"--timezone=off",
		"--console=passive",
	}
	if !registered {
		args = append(args, "--register=no")
	}
	if c.NetworkNamespacePath != "" {
		args = append(args, "--network-namespace-path="+c.NetworkNamespacePath)
	}
	for _, d := range c.DeviceBinds {
		args = append(args, "--bind="+d)
	}
	for _, b := range c.Binds {
		args = append(args, "--bind="+b)
	}
	for _, b := range c.ReadOnlyBinds {
		args = append(args, "--bind-ro="+b)
	}
	return args
}

// Digest identifies the launch configuration; a changed digest means the machine must be restarted.
func (c Config) Digest() string {
	h := sha256.Sum256([]byte(strings.Join(append(c.Args(false), Env...), "\x00")))
	return hex.EncodeToString(h[:8])
}

// SystemdIsPID1 reports whether the host runs systemd as init (sd_booted()'s test).
func SystemdIsPID1() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// Running returns the PID of the systemd-nspawn process running this machine, or 0. It looks for the
// process itself (in the machine's cgroup subtree or anywhere), so a launch whose PID was never recorded
// (agent crashed right after starting it) is still found.
func (c Config) Running() int {
	entries, _ := os.ReadDir("/proc")
	want := "--machine=" + c.Name
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		parts := strings.Split(string(cmd), "\x00")
		if len(parts) == 0 || filepath.Base(parts[0]) != "systemd-nspawn" {
			continue
		}
		for _, p := range parts {
			if p == want {
				return pid
			}
		}
	}
	return 0
}

// Start launches the machine and returns the launcher's PID. Directly: systemd-nspawn in a new session,
// moved into the cgroup subtree before it execs (so everything the machine starts stays inside), its
// output in LogFile. With systemd as PID 1: a transient unit yonder-machine-<name>.service.
func (c Config) Start(ctx context.Context, cgroupProcs []string) (pid int, unit string, err error) {
	bin := c.Nspawn
	if bin == "" {
		if bin, err = exec.LookPath("systemd-nspawn"); err != nil {
			return 0, "", fmt.Errorf("systemd-nspawn is missing: install systemd-container: %w", err)
		}
	}
	if SystemdIsPID1() {
		unit = "yonder-machine-" + c.Name + ".service"
		_, registered := os.Stat("/run/systemd/machines")
		args := []string{"--unit=" + unit, "--property=Delegate=yes", "--property=KillMode=mixed", "--property=Type=notify",
			"--collect"}
		for _, e := range Env {
			args = append(args, "--setenv="+e)
		}
		args = append(args, bin)
		args = append(args, c.Args(registered == nil)...)
		out, err := exec.CommandContext(ctx, "systemd-run", args...).CombinedOutput()
		if err != nil {
			return 0, unit, fmt.Errorf("systemd-run %s failed: %s: %w", unit, strings.TrimSpace(string(out)), err)
		}
		return c.Running(), unit, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.LogFile), 0o700); err != nil {
		return 0, "", err
	}
	logf, err := os.OpenFile(c.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, "", fmt.Errorf("failed to open machine log %s: %w", c.LogFile, err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command("/bin/sh", c.DirectLaunch(bin, cgroupProcs)...)
	cmd.Env = append(os.Environ(), Env...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, "", fmt.Errorf("failed to launch systemd-nspawn: %w", err)
	}
	pid = cmd.Process.Pid
	// Reap it in the background if it exits while we still run, so it can be seen to have died.
	go func() { _ = cmd.Wait() }()
	return pid, "", nil
}

// DirectLaunch returns the arguments of /bin/sh that launch the machine without systemd-run: the shell
// joins the cgroup subtree (cgroupProcs: its directories, from Cgroups.Create), so everything the machine
// starts stays inside, then becomes bin (systemd-nspawn) with Args(false). Run it with Env added.
func (c Config) DirectLaunch(bin string, cgroupProcs []string) []string {
	var script strings.Builder
	for _, p := range cgroupProcs {
		fmt.Fprintf(&script, "echo $$ > %s || exit 1; ", shellQuote(filepath.Join(p, "cgroup.procs")))
	}
	script.WriteString(`exec "$@"`)
	return append([]string{"-c", script.String(), "sh", bin}, c.Args(false)...)
}

// Leader returns the PID (host view) of the machine's init (systemd, PID 1 inside), or 0.
func Leader(launcherPID int) int {
	queue := []int{launcherPID}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err == nil && pid != launcherPID {
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "NSpid:") {
					f := strings.Fields(l)
					if len(f) >= 3 && f[len(f)-1] == "1" {
						return pid
					}
				}
			}
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		for _, t := range tasks {
			ch, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name(), "children"))
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(ch)) {
				if c, err := strconv.Atoi(s); err == nil {
					queue = append(queue, c)
				}
			}
		}
	}
	return 0
}

// Stop shuts the machine down: SIGTERM to systemd-nspawn (which powers the machine off cleanly), then,
// after grace, SIGKILL. The caller removes the cgroup subtree afterwards, which kills any straggler.
func (c Config) Stop(ctx context.Context, unit string, grace time.Duration) error {
	if unit != "" && SystemdIsPID1() {
		_ = exec.CommandContext(ctx, "systemctl", "stop", unit).Run()
	}
	pid := c.Running()
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if c.Running() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return nil
}

// Exec runs a command inside the running machine (nsenter into its init's namespaces).
func Exec(ctx context.Context, leader int, argv ...string) ([]byte, error) {
	args := append([]string{"--target", strconv.Itoa(leader), "--mount", "--uts", "--ipc", "--pid", "--net", "--"}, argv...)
	return exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
