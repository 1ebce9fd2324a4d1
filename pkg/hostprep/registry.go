package hostprep

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// DefaultRegistryDir is where agents on one host coordinate the host-global sysctls.
const DefaultRegistryDir = agentv1.SysctlRegistryDir

// Registry coordinates several nodes on one host. Sysctls are global to the machine, so the host's
// originals are recorded by the first node that changes them and restored only when the last node is
// reset; a node reset while another runs leaves the values the other's kubelet needs.
type Registry struct {
	// Dir holds originals.json and one holder file per node (default DefaultRegistryDir; /run, so a
	// reboot — which resets sysctls anyway — forgets it).
	Dir string
	// Sysctls reads and writes the values.
	Sysctls Sysctls
}

func (r Registry) dir() string {
	if r.Dir == "" {
		return DefaultRegistryDir
	}
	return r.Dir
}

// lockPath is the registry's lock file.
func (r Registry) lockPath() string { return filepath.Join(r.dir(), ".lock") }

// lock takes the registry's lock, creating the registry as needed. The holders directory is created under
// the lock: the last Release removes it, and one created before waiting would be gone by the time the lock
// is held.
func (r Registry) lock() (func(), error) {
	if err := os.MkdirAll(r.dir(), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the sysctl registry %s: %w", r.dir(), err)
	}
	f, err := os.OpenFile(r.lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(r.dir(), "holders"), 0o700); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("failed to create the sysctl registry %s: %w", r.dir(), err)
	}
	return func() { _ = f.Close() }, nil
}

func (r Registry) originals() (map[string]string, error) {
	m := map[string]string{}
	data, err := os.ReadFile(filepath.Join(r.dir(), "originals.json"))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	return m, json.Unmarshal(data, &m)
}

func (r Registry) saveOriginals(m map[string]string) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(r.dir(), ".originals.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.dir(), "originals.json"))
}

// Acquire registers holder and sets want, recording originals not recorded yet. It returns the names it
// changed and the host's originals as recorded.
func (r Registry) Acquire(holder string, want map[string]string) ([]string, map[string]string, error) {
	unlock, err := r.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	orig, err := r.originals()
	if err != nil {
		return nil, nil, fmt.Errorf("sysctl registry %s is corrupt: %w", r.dir(), err)
	}
	// Holder first: a crash after setting values still leaves a holder whose reset restores them.
	if err := os.WriteFile(filepath.Join(r.dir(), "holders", holder), nil, 0o600); err != nil {
		return nil, nil, err
	}
	changed, err := r.Sysctls.Apply(want, orig)
	if serr := r.saveOriginals(orig); serr != nil && err == nil {
		err = serr
	}
	return changed, orig, err
}

// Release unregisters holder; when no holder remains it restores the originals and empties the registry.
// The directory and its lock file stay: a lock file removed while another agent waits on it would let two
// agents lock different files, and something else on the kernel may have the directory mounted (test hosts
// with a private /run do); /run forgets them at the next boot. It returns the names restored (none while
// other nodes hold them) and the remaining holders.
func (r Registry) Release(holder string) ([]string, []string, error) {
	if _, err := os.Stat(r.dir()); errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	unlock, err := r.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(r.dir(), "holders", holder)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	entries, _ := os.ReadDir(filepath.Join(r.dir(), "holders"))
	var remaining []string
	for _, e := range entries {
		remaining = append(remaining, e.Name())
	}
	if len(remaining) > 0 {
		return nil, remaining, nil
	}
	orig, err := r.originals()
	if err != nil {
		return nil, nil, err
	}
	names := sortedKeys(orig)
	if err := r.Sysctls.Restore(orig); err != nil {
		_ = r.saveOriginals(orig) // keep what could not be restored for the next reset
		return nil, nil, err
	}
	sort.Strings(names)
	_ = os.RemoveAll(filepath.Join(r.dir(), "holders"))
	_ = os.Remove(filepath.Join(r.dir(), "originals.json"))
	return names, nil, nil
}

// HostValues returns the host's own value of each named sysctl — the original the registry recorded while
// nodes hold it, the current value otherwise: what the host returns to once its last node is reset — and
// the nodes holding the registry. It never creates the registry.
func (r Registry) HostValues(names []string) (map[string]string, []string, error) {
	for {
		unlock, exists, err := r.lockExisting()
		if err != nil {
			return nil, nil, err
		}
		values, err := r.currentValues(names)
		if err != nil {
			if unlock != nil {
				unlock()
			}
			return nil, nil, err
		}
		if !exists {
			// Values read with no registry are the host's own unless a node acquired it meanwhile.
			if _, err := os.Stat(filepath.Join(r.dir(), ".lock")); errors.Is(err, os.ErrNotExist) {
				return values, nil, nil
			}
			continue
		}
		holders, orig, err := r.holdersAndOriginals()
		unlock()
		if err != nil {
			return nil, nil, err
		}
		for _, name := range names {
			if v, ok := orig[name]; ok {
				values[name] = v
			}
		}
		return values, holders, nil
	}
}

// lockExisting takes the registry's lock only if the registry exists; a lock taken on a file removed
// meanwhile (agents before the lock file stayed removed it) belongs to a registry that no longer exists.
func (r Registry) lockExisting() (func(), bool, error) {
	f, err := os.OpenFile(r.lockPath(), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, false, err
	}
	if _, err := os.Stat(r.lockPath()); errors.Is(err, os.ErrNotExist) {
		_ = f.Close()
		return nil, false, nil
	}
	return func() { _ = f.Close() }, true, nil
}

func (r Registry) currentValues(names []string) (map[string]string, error) {
	values := map[string]string{}
	for _, name := range names {
		v, err := r.Sysctls.Get(name)
		if err != nil {
			return nil, err
		}
		values[name] = v
	}
	return values, nil
}

func (r Registry) holdersAndOriginals() ([]string, map[string]string, error) {
	orig, err := r.originals()
	if err != nil {
		return nil, nil, fmt.Errorf("sysctl registry %s is corrupt: %w", r.dir(), err)
	}
	entries, err := os.ReadDir(filepath.Join(r.dir(), "holders"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	var holders []string
	for _, e := range entries {
		holders = append(holders, e.Name())
	}
	return holders, orig, nil
}
