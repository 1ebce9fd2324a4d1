package nspawn

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroups is the machine's own subtree in every cgroup hierarchy, v1 and v2 alike. Two kubelets on one host
// (two machines) must not share a cgroup parent, or each treats the other's pods as its own and kills them.
// Two machines must not share a systemd cgroup either: systemd-nspawn puts its payload in "payload" below
// the cgroup it starts in, read from the hierarchy systemd tracks processes in (the cgroup2 one on a hybrid
// or unified host), and mirrors that path into name=systemd. Left in a shared parent there, both machines'
// systemd would create and remove the same unit cgroups, and a unit whose cgroup the other machine just
// removed fails to start (status=219/CGROUP).
type Cgroups struct {
	// Name is the subtree's directory name under each hierarchy's root.
	Name string
	// MountInfo is the mountinfo file listing the hierarchies (default /proc/self/mountinfo).
	MountInfo string
}

// Hierarchies returns the mount points of the cgroup hierarchies mounted at their root: every v1 one
// (name=systemd included) and the cgroup2 one (/sys/fs/cgroup/unified on a hybrid host, /sys/fs/cgroup on
// a unified one).
func (c Cgroups) Hierarchies() ([]string, error) {
	mi := c.MountInfo
	if mi == "" {
		mi = "/proc/self/mountinfo"
	}
	f, err := os.Open(mi) //nolint:gosec // a mountinfo path (tests re-root it)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", mi, err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	seen := map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - cgroup cgroup rw,memory
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fs := fields[sep+1]; (fs != "cgroup" && fs != "cgroup2") || fields[3] != "/" { // only hierarchies mounted at their root
			continue
		}
		mp := fields[4]
		if !seen[mp] {
			seen[mp] = true
			out = append(out, mp)
		}
	}
	sort.Strings(out)
	return out, s.Err()
}

// Paths are the subtree's directories, one per hierarchy. Name must be one directory name: an empty one
// would be each hierarchy's root, and KillAndRemove would kill every process on the machine.
func (c Cgroups) Paths() ([]string, error) {
	if c.Name == "" || c.Name == "." || c.Name == ".." || strings.Contains(c.Name, "/") {
		return nil, fmt.Errorf("cgroup subtree name %q is not a single directory name", c.Name)
	}
	hs, err := c.Hierarchies()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, filepath.Join(h, c.Name))
	}
	return out, nil
}

// Create makes the subtree in every hierarchy (idempotent). cpuset needs cpus and mems before a process
// may join, so they are copied from the parent.
func (c Cgroups) Create() ([]string, error) {
	paths, err := c.Paths()
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // cgroup directories are world-readable by design
			return nil, fmt.Errorf("failed to create cgroup %s: %w", p, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(p), f)) //nolint:gosec // cgroup control files
			if err != nil || strings.TrimSpace(string(parent)) == "" {
				continue // not a cpuset hierarchy, or cgroup2's cpuset, which inherits when left empty
			}
			cur, _ := os.ReadFile(filepath.Join(p, f)) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
			if strings.TrimSpace(string(cur)) == "" {
				if err := os.WriteFile(filepath.Join(p, f), parent, 0o644); err != nil { //nolint:gosec // cgroup control file
					return nil, fmt.Errorf("failed to initialise %s/%s: %w", p, f, err)
				}
			}
		}
	}
	return paths, nil
}

// Procs lists every process in the subtree (all hierarchies, all descendants).
func (c Cgroups) Procs() ([]int, error) {
	paths, err := c.Paths()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, p := range paths {
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs")) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
			if err != nil {
				return nil
			}
			for _, l := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(l); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	sort.Ints(out)
	return out, nil
}

// KillAndRemove kills every process in the subtree and removes its directories, deepest first, retrying
// until timeout (processes take a moment to leave their cgroups after SIGKILL).
func (c Cgroups) KillAndRemove(timeout time.Duration) error {
	paths, err := c.Paths()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		procs, _ := c.Procs()
		for _, pid := range procs {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var left []string
		for _, p := range paths {
			var dirs []string
			_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, d := range dirs {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups %s still busy after %s (processes %v): kill them and run reset again", strings.Join(left, ", "), timeout, procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exists reports whether any directory of the subtree exists.
func (c Cgroups) Exists() bool {
	paths, err := c.Paths()
	if err != nil {
		return false
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
