package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
	"github.com/yonder-dev/yonder/pkg/nspawn"
)

// ResetReport says what reset removed and what it kept.
type ResetReport struct {
	// Removed lists what was removed (paths, the machine, cgroups, sysctls restored).
	Removed []string `json:"removed"`
	// Kept lists paths left on purpose (the caches with --keep-cache).
	Kept []string `json:"kept"`
}

// Reset leaves the host as it was before bootstrap: the boot unit gone, the machine stopped, its cgroup
// subtree gone, no mounts left below its machines directory, the node's network leftovers removed (CNI
// bridge, veths, netfilter chains and the tables created for them, forwarding sysctls restored), the host's
// sysctls restored, the sentinel and the state directory removed (except the caches when KeepCache), then
// the AgentConfig and the providerID file. It works without a state file (a crashed first bootstrap):
// names then come from the options or the AgentConfig.
func Reset(ctx context.Context, o Options) (*ResetReport, error) {
	st, err := resetOptions(&o)
	if err != nil {
		return nil, err
	}
	log, closeLog := o.logger()
	log.Info("Resetting node", "machine", o.MachineName, "stateDir", o.StateDir)
	rep := &ResetReport{Removed: []string{}, Kept: []string{}}
	var errs []error
	if o.MachineName != "" {
		// First: a boot-time converge still running would relaunch the machine stopped next.
		errs = append(errs, rep.removeBootUnit(ctx, o)...)
		errs = append(errs, rep.stopSlots(ctx, o, st)...)
	}
	errs = append(errs, rep.unmountMachines(o)...)
	if o.MachineName != "" {
		errs = append(errs, rep.resetNetwork(o, st)...)
		errs = append(errs, rep.restoreSysctls(o)...)
	}
	errs = append(errs, rep.removeSentinel(o, st)...)
	closeLog()
	if len(errs) > 0 {
		return rep, fmt.Errorf("reset incomplete (state kept in %s; run reset again): %w", o.StateDir, errors.Join(errs...))
	}
	if errs := rep.removeStateDir(o); len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	// Last: without a state file, reset finds the machine's name in the AgentConfig.
	if errs := rep.removeNodeFiles(o, st); len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	return rep, nil
}

// removeNodeFiles removes the files that made this host the node, which the bootstrap data and the
// infrastructure provider wrote for it: the AgentConfig (it holds the spent bootstrap token) and the
// providerID file; and the directories the node's files were in, /etc/yonder and /run/cluster-api (the
// sentinel's), when that leaves them empty.
func (rep *ResetReport) removeNodeFiles(o Options, st *state.State) []error {
	var errs []error
	dirs := map[string]string{}
	for _, p := range []string{o.ConfigPath, o.ProviderIDFile} {
		if err := os.Remove(p); err == nil {
			rep.Removed = append(rep.Removed, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", p, err))
		}
		dirs[filepath.Dir(p)] = filepath.Base(filepath.Dir(agentv1.DefaultPath))
	}
	for _, p := range []string{st.Sentinel, o.SentinelPath} {
		if p != "" {
			dirs[filepath.Dir(p)] = filepath.Base(filepath.Dir(DefaultSentinel))
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		// Only the node's own directories, by the names the defaults give them: a config elsewhere (say,
		// /root/agent.yaml) never takes its directory with it.
		if filepath.Base(d) != dirs[d] {
			continue
		}
		switch err := os.Remove(d); {
		case err == nil:
			rep.Removed = append(rep.Removed, d)
		case errors.Is(err, syscall.EBUSY):
			rep.Kept = append(rep.Kept, d+" (mount point)") // a filesystem of its own there is not the node's
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST):
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", d, err))
		}
	}
	return errs
}

// resetOptions completes the options from the state file, or without one (a crashed first bootstrap)
// from the AgentConfig, and returns the state (empty when there is none).
func resetOptions(o *Options) (*state.State, error) {
	nodeName := ""
	store := state.Store{Dir: o.StateDir}
	if o.StateDir == "" {
		store.Dir = DefaultStateDir
	}
	st, err := store.Load()
	if err != nil {
		st = &state.State{}
	}
	if st.Machine != nil && o.MachineName == "" {
		o.MachineName = st.Machine.Base
		if o.MachineName == "" {
			o.MachineName = st.Machine.Name
		}
	}
	if o.MachineName == "" {
		if cfg, err := LoadConfig(orDefault(o.ConfigPath)); err == nil {
			nodeName = cfg.NodeName
		} else if st.NodeName != "" {
			nodeName = st.NodeName
		}
	}
	return st, o.defaults(nodeName)
}

// removeBootUnit stops, disables and removes the node's boot unit and reloads systemd.
func (rep *ResetReport) removeBootUnit(ctx context.Context, o Options) []error {
	removed, err := o.BootUnits.Remove(ctx, o.baseMachine)
	if err != nil {
		return []error{fmt.Errorf("failed to remove the boot unit: %w", err)}
	}
	if removed != "" {
		rep.Removed = append(rep.Removed, removed)
	}
	return nil
}

// stopSlots stops the machines of both blue/green slots and removes their cgroup subtrees.
func (rep *ResetReport) stopSlots(ctx context.Context, o Options, st *state.State) []error {
	var errs []error
	for _, slot := range o.slots() {
		so := o
		so.useSlot(slot)
		unit := ""
		if st.Machine != nil && st.Machine.Name == slot {
			unit = st.Machine.Unit
		}
		if err := stopMachine(ctx, &so, unit); err != nil {
			errs = append(errs, err)
		} else if so.stopped {
			rep.Removed = append(rep.Removed, "machine "+slot, "cgroups "+so.CgroupName)
		}
	}
	return errs
}

// unmountMachines detaches the mounts the machine may have left (propagated mounts, a crashed launch),
// deepest first. Only mounts strictly below the machines directory are the agent's: the state directory,
// or machines/ itself, may be a filesystem the operator mounted there (a dedicated disk for
// /var/lib/yonder), and detaching it would pull the disk out from under the host.
func (rep *ResetReport) unmountMachines(o Options) []error {
	var errs []error
	for _, m := range MountsBelow(o.machinesDir()) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("failed to unmount %s: %w", m, err))
		} else {
			rep.Removed = append(rep.Removed, "mount "+m)
		}
	}
	return errs
}

// restoreSysctls gives the host its original sysctls back once no other node on it needs them.
func (rep *ResetReport) restoreSysctls(o Options) []error {
	restored, remaining, err := o.sysctlRegistry().Release(o.baseMachine)
	switch {
	case err != nil:
		return []error{fmt.Errorf("failed to restore host sysctls: %w", err)}
	case len(restored) > 0:
		rep.Removed = append(rep.Removed, "sysctls restored: "+strings.Join(restored, ","))
	case len(remaining) > 0:
		rep.Kept = append(rep.Kept, "host sysctls (still needed by nodes "+strings.Join(remaining, ",")+")")
	}
	return nil
}

func (rep *ResetReport) removeSentinel(o Options, st *state.State) []error {
	sentinel := st.Sentinel
	if sentinel == "" {
		sentinel = o.SentinelPath
	}
	if !fileExists(sentinel) {
		return nil
	}
	if err := os.Remove(sentinel); err != nil {
		return []error{err}
	}
	rep.Removed = append(rep.Removed, sentinel)
	return nil
}

// removeStateDir removes the state directory (but the caches with KeepCache). What is still mounted below
// it now is the operator's (machines/ or cache/ on their own disk): it is emptied, the mount point kept.
func (rep *ResetReport) removeStateDir(o Options) []error {
	operatorMounts := map[string]bool{}
	for _, m := range MountsBelow(o.StateDir) {
		operatorMounts[m] = true
	}
	var errs []error
	entries, _ := os.ReadDir(o.StateDir)
	for _, e := range entries {
		p := filepath.Join(o.StateDir, e.Name())
		switch {
		case o.KeepCache && e.Name() == "cache":
			rep.Kept = append(rep.Kept, p)
		case operatorMounts[p]:
			if err := removeContents(p); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Removed = append(rep.Removed, filepath.Join(p, "*"))
			rep.Kept = append(rep.Kept, p+" (mount point)")
		default:
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("failed to remove %s: %w", p, err))
				continue
			}
			rep.Removed = append(rep.Removed, p)
		}
	}
	if !o.KeepCache || len(entries) == 0 {
		if err := os.Remove(o.StateDir); err == nil {
			rep.Removed = append(rep.Removed, o.StateDir)
		}
	}
	return errs
}

// stopMachine stops the slot's machine and removes its cgroup subtree; so.stopped says whether there
// was anything to stop.
func stopMachine(ctx context.Context, so *Options, unit string) error {
	c := nspawn.Config{Name: so.MachineName, Rootfs: so.rootfsDir()}
	if c.Running() != 0 {
		so.stopped = true
		if err := c.Stop(ctx, unit, so.StopGrace); err != nil {
			return fmt.Errorf("failed to stop machine %s: %w", so.MachineName, err)
		}
	}
	cg := nspawn.Cgroups{Name: so.CgroupName}
	if cg.Exists() {
		so.stopped = true
		if err := cg.KillAndRemove(15 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

// MountsBelow lists the mount points strictly below dir, deepest first. dir itself is never listed,
// even when it is a mount point: a directory the agent was pointed at may be the operator's filesystem.
func MountsBelow(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	return mountsBelow(f, dir)
}

// mountsBelow is MountsBelow reading a mountinfo table (proc(5)) from r.
func mountsBelow(r io.Reader, dir string) []string {
	dir = filepath.Clean(dir)
	prefix := dir
	if !strings.HasSuffix(prefix, "/") { // "/" is the only cleaned path ending in a slash
		prefix += "/"
	}
	var out []string
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp != dir && strings.HasPrefix(mp, prefix) {
			out = append(out, mp)
		}
	}
	// Deepest first, so a mount is detached before the one it sits on; stable keeps stacked mounts
	// of one path (listed once per layer) in mountinfo order.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// removeContents removes everything inside dir but not dir itself.
func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("failed to remove %s: %w", p, err)
		}
	}
	return nil
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func orDefault(p string) string {
	if p == "" {
		return "/etc/yonder/agent-config.yaml"
	}
	return p
}
