package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/yonder-dev/yonder/hostruntime/internal/nspawn"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// ResetReport says what reset removed and what it kept.
type ResetReport struct {
	// Removed lists what was removed (paths, the machine, cgroups, sysctls restored).
	Removed []string `json:"removed"`
	// Kept lists paths left on purpose (the caches with --keep-cache).
	Kept []string `json:"kept"`
}

// Reset leaves the host as it was before bootstrap: the machine stopped, its cgroup subtree gone, no
// mounts under the state directory, the host's sysctls restored, the sentinel and the state directory
// removed (except the caches when KeepCache). It works without a state file (a crashed first bootstrap):
// names then come from the options or the AgentConfig.
func Reset(ctx context.Context, o Options) (*ResetReport, error) {
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
	if err := o.defaults(nodeName); err != nil {
		return nil, err
	}
	log, closeLog := o.logger()
	log.Info("Resetting node", "machine", o.MachineName, "stateDir", o.StateDir)
	rep := &ResetReport{Removed: []string{}, Kept: []string{}}
	var errs []error
	if o.MachineName != "" {
		for _, slot := range o.slots() { // both blue/green slots
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
	}
	// Mounts the machine may have left (propagated mounts, a crashed launch): deepest first.
	for _, m := range MountsUnder(o.StateDir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("failed to unmount %s: %w", m, err))
		} else {
			rep.Removed = append(rep.Removed, "mount "+m)
		}
	}
	if o.MachineName != "" {
		restored, remaining, err := o.sysctlRegistry().Release(o.baseMachine)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("failed to restore host sysctls: %w", err))
		case len(restored) > 0:
			rep.Removed = append(rep.Removed, "sysctls restored: "+strings.Join(restored, ","))
		case len(remaining) > 0:
			rep.Kept = append(rep.Kept, "host sysctls (still needed by nodes "+strings.Join(remaining, ",")+")")
		}
	}
	sentinel := st.Sentinel
	if sentinel == "" {
		sentinel = o.SentinelPath
	}
	if fileExists(sentinel) {
		if err := os.Remove(sentinel); err != nil {
			errs = append(errs, err)
		} else {
			rep.Removed = append(rep.Removed, sentinel)
		}
	}
	closeLog()
	if len(errs) > 0 {
		return rep, fmt.Errorf("reset incomplete (state kept in %s; run reset again): %w", o.StateDir, errors.Join(errs...))
	}
	entries, _ := os.ReadDir(o.StateDir)
	for _, e := range entries {
		p := filepath.Join(o.StateDir, e.Name())
		if o.KeepCache && e.Name() == "cache" {
			rep.Kept = append(rep.Kept, p)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", p, err))
			continue
		}
		rep.Removed = append(rep.Removed, p)
	}
	if !o.KeepCache || len(entries) == 0 {
		if err := os.Remove(o.StateDir); err == nil {
			rep.Removed = append(rep.Removed, o.StateDir)
		}
	}
	if len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	return rep, nil
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

// MountsUnder lists mount points at or below dir, deepest first.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	dir = filepath.Clean(dir)
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
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
