package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOverlayUnsupported says the host cannot stack a machine's root on the shared tree: the kernel has no
// overlay filesystem, the state directory's filesystem cannot hold an overlay's upper layer (it is itself
// an overlay, as in a container), or the agent may not mount.
var ErrOverlayUnsupported = errors.New("an overlay root is not supported here")

// Machine is one machine's root directory and what the agent keeps beside it. When the host supports it,
// Dir is an overlay mount: the unpacked tree (shared by every machine on the host, kept in the cache and
// never written) as its lower layer, and the machine's own changes in Data/upper. That is why a warm host
// starts a node without extracting anything: the rootfs phase is one mount. containerd's directory is a
// bind of Data/containerd, because containerd's overlayfs snapshotter cannot put its upper layers on an
// overlay (the kernel refuses one overlay's upper directory on another). Where the host cannot mount an
// overlay (OverlaySupported), the agent unpacks the tree into Dir itself, as it did before.
type Machine struct {
	Dir  string
	Data string
}

// NewMachine names the machine whose root is dir; its data lives beside it in dir.data.
func NewMachine(dir string) Machine { return Machine{Dir: dir, Data: dir + ".data"} }

func (m Machine) upper() string { return filepath.Join(m.Data, "upper") }
func (m Machine) work() string  { return filepath.Join(m.Data, "work") }

// ContainerdDir is the host directory bound to the machine's /var/lib/containerd when its root is an
// overlay.
func (m Machine) ContainerdDir() string { return filepath.Join(m.Data, "containerd") }

// Overlaid reports whether the machine's root is (or, unmounted after a reboot, was) an overlay.
func (m Machine) Overlaid() bool {
	st, err := os.Stat(m.upper())
	return err == nil && st.IsDir()
}

// Mount makes Dir the overlay of tree and the machine's upper layer, keeping an upper layer that exists
// (the same machine after a host reboot). Mounting what is already mounted does nothing.
func (m Machine) Mount(tree string) error {
	if Init(m.Dir) != "" && m.Overlaid() {
		return nil
	}
	for _, d := range []string{m.Dir, m.upper(), m.work(), m.ContainerdDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // a root filesystem's root is 0755
			return err
		}
	}
	opts := "lowerdir=" + tree + ",upperdir=" + m.upper() + ",workdir=" + m.work()
	if err := unix.Mount("overlay", m.Dir, "overlay", 0, opts); err != nil {
		_ = os.RemoveAll(m.Data) // Overlaid stays false
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: mount overlay on %s: %w", ErrOverlayUnsupported, m.Dir, err)
		}
		return fmt.Errorf("failed to mount the machine's root %s (overlay of %s): %w", m.Dir, tree, err)
	}
	return nil
}

// OverlaySupported probes, in a scratch directory below dir, whether machines there can have an overlay
// root; the error says why not (ErrOverlayUnsupported wrapping the kernel's answer) or that the probe
// itself failed.
func OverlaySupported(dir string) error {
	probe, err := os.MkdirTemp(dir, ".overlay-probe-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(probe) }()
	lower := filepath.Join(probe, "lower")
	if err := os.Mkdir(lower, 0o755); err != nil { //nolint:gosec // an empty directory
		return err
	}
	m := NewMachine(filepath.Join(probe, "root"))
	if err := m.Mount(lower); err != nil {
		if errors.Is(err, ErrOverlayUnsupported) {
			return err
		}
		// Whatever else refuses an empty overlay in a scratch directory refuses the machine's too.
		return fmt.Errorf("%w: %w", ErrOverlayUnsupported, err)
	}
	return m.Discard()
}

// Discard removes the machine's root and data: the overlay is detached first, so nothing is removed
// through it (the shared tree below is never touched).
func (m Machine) Discard() error {
	if err := unix.Unmount(m.Dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("failed to unmount the machine's root %s: %w", m.Dir, err)
	}
	for _, p := range []string{m.Dir, m.Dir + ".partial", m.Data} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("failed to remove %s: %w", p, err)
		}
	}
	return nil
}

// OverlayLowerDirs lists the lower directories of the overlays mounted strictly below dir, read from a
// mountinfo table (proc(5)): the trees still in use.
func OverlayLowerDirs(mountinfo, dir string) []string {
	prefix := filepath.Clean(dir) + "/"
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "overlay" || !strings.HasPrefix(f[4], prefix) {
			continue
		}
		for _, o := range strings.Split(g[2], ",") {
			if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				out = append(out, strings.Split(v, ":")...)
			}
		}
	}
	return out
}
