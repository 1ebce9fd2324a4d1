// Package keys keeps a node's WireGuard private key on disk: generated once, persisted 0600, reused across
// restarts, so the public key a node publishes never changes unless it is rotated on purpose.
package keys

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/pkg/atomicfile"
)

// LoadOrCreate returns the key stored at path, generating and persisting a new one (mode 0600) when the file
// does not exist. A file with other permissions than 0600 is tightened; a file that does not parse is an error
// (never silently replaced: that would change the node's identity).
func LoadOrCreate(path string) (wgtypes.Key, error) {
	k, err := Load(path)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, err
	}
	k, err = wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("failed to generate private key: %w", err)
	}
	if err := Store(path, k); err != nil {
		return wgtypes.Key{}, err
	}
	return k, nil
}

// Load reads a key written by Store.
func Load(path string) (wgtypes.Key, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the configured key file
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("failed to read key %s: %w", path, err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("failed to parse key %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return wgtypes.Key{}, fmt.Errorf("failed to restrict key %s to 0600: %w", path, err)
		}
	}
	return k, nil
}

// Store writes k atomically (pkg/atomicfile: a private temporary file, fsync, rename) with mode 0600.
func Store(path string, k wgtypes.Key) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("failed to create key directory for %s: %w", path, err)
	}
	return atomicfile.Write(path, []byte(k.String()+"\n"), 0o600)
}

// SlotKeyPath is the key file of a WireGuard slot in dir: private.key for slot 0 (the file nodes had before
// rotation existed), private-1.key for slot 1.
func SlotKeyPath(dir string, slot int) string {
	if slot == 0 {
		return filepath.Join(dir, "private.key")
	}
	return filepath.Join(dir, fmt.Sprintf("private-%d.key", slot))
}

// Slots is the node's WireGuard slot state: Current carries the published key; Next is the slot being
// brought up by a rotation, or -1.
type Slots struct {
	Current, Next int
}

// Rotating reports whether a rotation is in progress.
func (s Slots) Rotating() bool { return s.Next >= 0 }

// LoadSlots reads dir/slot ("0", "1", or "0>1"/"1>0" during a rotation); a missing file is slot 0, not
// rotating. One small file written atomically makes the switch a single rename: after a crash the node
// comes back either before or after it, never half-way.
func LoadSlots(dir string) (Slots, error) {
	b, err := os.ReadFile(filepath.Join(dir, "slot")) //nolint:gosec // the daemon's state directory
	if errors.Is(err, fs.ErrNotExist) {
		return Slots{Current: 0, Next: -1}, nil
	}
	if err != nil {
		return Slots{}, fmt.Errorf("failed to read WireGuard slot state in %s: %w", dir, err)
	}
	switch strings.TrimSpace(string(b)) {
	case "0":
		return Slots{Current: 0, Next: -1}, nil
	case "1":
		return Slots{Current: 1, Next: -1}, nil
	case "0>1":
		return Slots{Current: 0, Next: 1}, nil
	case "1>0":
		return Slots{Current: 1, Next: 0}, nil
	}
	return Slots{}, fmt.Errorf("failed to parse WireGuard slot state in %s: %q is not 0, 1, 0>1 or 1>0", dir, strings.TrimSpace(string(b)))
}

// StoreSlots writes the slot state atomically.
func StoreSlots(dir string, s Slots) error {
	v := fmt.Sprint(s.Current)
	if s.Rotating() {
		v = fmt.Sprintf("%d>%d", s.Current, s.Next)
	}
	tmp := filepath.Join(dir, ".slot.tmp")
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write WireGuard slot state in %s: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "slot")); err != nil {
		return fmt.Errorf("failed to write WireGuard slot state in %s: %w", dir, err)
	}
	return nil
}
