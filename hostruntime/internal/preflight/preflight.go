// Package preflight checks that a host can run a node before the agent changes anything, and reports every
// problem at once with what to do about it.
package preflight

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Severity of a check's outcome.
type Severity string

// Outcomes.
const (
	OK   Severity = "OK"
	Warn Severity = "Warning"
	Fail Severity = "Fail"
)

// Check is one outcome.
type Check struct {
	Name     string   `json:"name"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
	// Fix says what to do (empty when OK).
	Fix string `json:"fix,omitempty"`
}

// Report is every check's outcome.
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed returns the failing checks.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Severity == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Err summarises failures as one error (nil when none failed).
func (r *Report) Err() error {
	var errs []error
	for _, c := range r.Failed() {
		errs = append(errs, fmt.Errorf("%s: %s (fix: %s)", c.Name, c.Message, c.Fix))
	}
	return errors.Join(errs...)
}

func (r *Report) add(name string, sev Severity, msg, fix string) {
	r.Checks = append(r.Checks, Check{Name: name, Severity: sev, Message: msg, Fix: fix})
}

// Input says what to check.
type Input struct {
	// StateDir must have MinFreeBytes free.
	StateDir     string
	MinFreeBytes uint64
	// Ports must be free to listen on (skipped when the node already runs: they are then ours).
	Ports []int
	// Tools must be on PATH.
	Tools []string
	// MountInfo is the mountinfo to read cgroup hierarchies from (default /proc/self/mountinfo).
	MountInfo string
	// BridgeNetfilter checks that the bridge netfilter is there or loadable: the host phase turns it on,
	// so that pods reach Services whose endpoints share their Node (docs/agent.md).
	BridgeNetfilter bool
	// ProcSys, ModulesDir and Modprobe are where that check looks and what it looks for (defaults /proc/sys,
	// /lib/modules/<release>, modprobe on PATH).
	ProcSys, ModulesDir, Modprobe string
}

// Run performs every check.
func Run(in Input) *Report {
	r := &Report{}
	if os.Geteuid() != 0 {
		r.add("root", Fail, "yonder-agent runs as uid "+strconv.Itoa(os.Geteuid()), "run it as root (sudo)")
	} else {
		r.add("root", OK, "running as root", "")
	}
	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err == nil {
		rel := utsString(uts.Release[:])
		maj, minor := kernelVersion(rel)
		if maj < 4 || (maj == 4 && minor < 19) {
			r.add("kernel", Fail, "kernel "+rel+" is older than 4.19", "upgrade the kernel (overlayfs and cgroup features the kubelet needs)")
		} else {
			r.add("kernel", OK, "kernel "+rel, "")
		}
	}
	mi := in.MountInfo
	if mi == "" {
		mi = "/proc/self/mountinfo"
	}
	if data, err := os.ReadFile(mi); err != nil { //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
		r.add("cgroups", Fail, "cannot read "+mi+": "+err.Error(), "mount /proc")
	} else {
		v1 := strings.Count(string(data), " - cgroup ")
		v2 := strings.Contains(string(data), " - cgroup2 ")
		switch {
		case v1 > 0:
			r.add("cgroups", OK, fmt.Sprintf("cgroup v1 (%d hierarchies; each machine gets its own subtree)", v1), "")
		case v2:
			r.add("cgroups", OK, "cgroup v2", "")
		default:
			r.add("cgroups", Fail, "no cgroup filesystem is mounted", "mount cgroups (cgroup v1 controllers or cgroup2 at /sys/fs/cgroup)")
		}
	}
	if data, err := os.ReadFile("/proc/swaps"); err == nil && len(strings.Split(strings.TrimSpace(string(data)), "\n")) > 1 {
		r.add("swap", Warn, "swap is on; the kubelet runs with failSwapOn=false", "turn swap off (swapoff -a) for predictable memory accounting")
	} else {
		r.add("swap", OK, "no swap", "")
	}
	for _, p := range in.Ports {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			r.add("port "+strconv.Itoa(p), Fail, "port "+strconv.Itoa(p)+" is in use: "+err.Error(), "stop what listens there (another kubelet?) or run reset")
			continue
		}
		_ = l.Close()
		r.add("port "+strconv.Itoa(p), OK, "free", "")
	}
	if in.StateDir != "" {
		dir := in.StateDir
		for {
			if _, err := os.Stat(dir); err == nil || dir == "/" {
				break
			}
			dir = parent(dir)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			free := st.Bavail * uint64(st.Bsize) //nolint:gosec // block size is positive
			if free < in.MinFreeBytes {
				r.add("disk", Fail, fmt.Sprintf("%s has %d MiB free, the node needs %d MiB", dir, free>>20, in.MinFreeBytes>>20), "free disk space or point --state-dir at a larger filesystem")
			} else {
				r.add("disk", OK, fmt.Sprintf("%d MiB free in %s", free>>20, dir), "")
			}
		}
	}
	if in.BridgeNetfilter {
		bridgeNetfilter(r, in, utsString(uts.Release[:]))
	}
	for _, t := range in.Tools {
		if _, err := exec.LookPath(t); err != nil {
			r.add("tool "+t, Fail, t+" is not installed", "install it ("+packageOf(t)+")")
		} else {
			r.add("tool "+t, OK, "found", "")
		}
	}
	return r
}

// bridgeNetfilter reports whether br_netfilter is there (built in or loaded: its sysctls exist) or can be
// loaded (modprobe and a module its kernel lists). What it cannot tell is a warning, not a failure: the
// host phase loads the module itself and fails with modprobe's own reason if that does not work.
func bridgeNetfilter(r *Report, in Input, release string) {
	procSys, modules, modprobe := in.ProcSys, in.ModulesDir, in.Modprobe
	if modprobe == "" {
		modprobe = "modprobe"
	}
	if procSys == "" {
		procSys = "/proc/sys"
	}
	if modules == "" {
		modules = filepath.Join("/lib/modules", release)
	}
	if _, err := os.Stat(filepath.Join(procSys, "net/bridge/bridge-nf-call-iptables")); err == nil {
		r.add("bridge netfilter", OK, "br_netfilter is there (its sysctls exist)", "")
		return
	}
	_, modprobeErr := exec.LookPath(modprobe)
	dep, depErr := os.ReadFile(filepath.Join(modules, "modules.dep")) //nolint:gosec // the kernel's own module index
	listed := depErr == nil && strings.Contains(string(dep), "/br_netfilter.ko")
	switch {
	case modprobeErr == nil && listed:
		r.add("bridge netfilter", OK, "br_netfilter is not loaded; the host phase loads it (modprobe br_netfilter)", "")
	case modprobeErr != nil:
		r.add("bridge netfilter", Warn, "br_netfilter is not loaded and modprobe is not installed",
			"install kmod, or load br_netfilter before the bootstrap: pods reach Services whose endpoints share their Node only with it")
	default:
		r.add("bridge netfilter", Warn, "br_netfilter is not loaded and "+filepath.Join(modules, "modules.dep")+" does not list it",
			"use a kernel with br_netfilter (CONFIG_BRIDGE_NETFILTER), or load it before the bootstrap: pods reach Services whose endpoints share their Node only with it")
	}
}

func packageOf(tool string) string {
	switch tool {
	case "systemd-nspawn":
		return "Debian/Ubuntu: systemd-container"
	case "nsenter":
		return "util-linux"
	case "zstd":
		return "zstd"
	case "debootstrap":
		return "debootstrap"
	}
	return tool
}

func parent(p string) string {
	i := strings.LastIndex(strings.TrimRight(p, "/"), "/")
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c)) //nolint:gosec // utsname bytes are ASCII
	}
	return string(out)
}

func kernelVersion(rel string) (int, int) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	maj, _ := strconv.Atoi(parts[0])
	minStr := parts[1]
	for i, c := range minStr {
		if c < '0' || c > '9' {
			minStr = minStr[:i]
			break
		}
	}
	minor, _ := strconv.Atoi(minStr)
	return maj, minor
}
