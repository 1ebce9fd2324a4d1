// Package hostprep prepares the host for a kubelet that runs inside a systemd-nspawn machine: yonder-agent's
// node machine, and the tests' full-OS hosts (test/hosts), which take part in the same registry.
//
// The kubelet insists on a few kernel sysctls and treats failing to write them as fatal, but /proc/sys is
// read-only inside the machine: the agent sets them on the host first. They are global to the machine
// (not per network namespace), so the original values are recorded once — never overwritten by a
// re-run, which would record the agent's own values — and restored by reset.
package hostprep

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MachinePrepCommand is the shell command a machine booted by systemd-nspawn runs before containerd and the
// kubelet (yonder-agent's node machine, the tests' full-OS hosts): nspawn mounts the cgroup v1 controllers
// read-only, and the kubelet and runc need them writable; the kubelet reads /dev/kmsg, which the machine may lack.
const MachinePrepCommand = `for d in /sys/fs/cgroup/*/; do case "$d" in */unified/) continue;; esac; mount -o remount,bind,rw "$d" 2>/dev/null || true; done; [ -e /dev/kmsg ] || mknod -m 600 /dev/kmsg c 1 11 || true`

// KubeletSysctls are the values kubelet (protectKernelDefaults=false) writes at start-up.
var KubeletSysctls = map[string]string{
	"vm.overcommit_memory": "1",
	"vm.panic_on_oom":      "0",
	"kernel.panic":         "10",
	"kernel.panic_on_oops": "1",
}

// Sysctls reads and writes sysctls under a /proc/sys root (configurable for tests).
type Sysctls struct {
	// Root is the directory holding sysctl files (default /proc/sys).
	Root string
}

func (s Sysctls) path(name string) string {
	root := s.Root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, strings.ReplaceAll(name, ".", "/"))
}

// Get returns a sysctl's current value (trimmed).
func (s Sysctls) Get(name string) (string, error) {
	b, err := os.ReadFile(s.path(name))
	if err != nil {
		return "", fmt.Errorf("failed to read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Set writes a sysctl.
func (s Sysctls) Set(name, value string) error {
	if err := os.WriteFile(s.path(name), []byte(value+"\n"), 0o644); err != nil { //nolint:gosec // sysctl files are not created, only written
		return fmt.Errorf("failed to set sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

// Apply sets every wanted value, recording in saved the original of each sysctl it is the first to
// change. saved is updated in place; entries already present are kept (they are the host's originals).
// It returns the names it changed in this call.
func (s Sysctls) Apply(want map[string]string, saved map[string]string) ([]string, error) {
	var changed []string
	for _, name := range sortedKeys(want) {
		cur, err := s.Get(name)
		if err != nil {
			return changed, err
		}
		if cur == want[name] {
			continue
		}
		if _, ok := saved[name]; !ok {
			saved[name] = cur
		}
		if err := s.Set(name, want[name]); err != nil {
			return changed, err
		}
		changed = append(changed, name)
	}
	return changed, nil
}

// Restore writes back every saved original and removes it from saved when restored.
func (s Sysctls) Restore(saved map[string]string) error {
	var errs []error
	for _, name := range sortedKeys(saved) {
		if err := s.Set(name, saved[name]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(saved, name)
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
