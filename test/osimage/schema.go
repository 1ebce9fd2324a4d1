package osimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// rootOffset is where the root partition starts in the raw image (writeDisk: one partition at 1 MiB).
const rootOffset = 1 << 20

// CloudInitSchema checks userData the way the image's own cloud-init does (`cloud-init schema
// --config-file`, cloud-init 22.4 here), so bootstrap data can be proven valid for real cloud-init without
// booting a machine. cloud-init runs in a chroot of the image's root filesystem, mounted read-only (the raw
// image is never written) in a private mount namespace with a tmpfs on /tmp for the data: the mounts and
// their loop device go away with the namespace, even if the caller dies. Needs root. It returns cloud-init's
// output; err is not nil when cloud-init refuses the data or could not run.
func (img Image) CloudInitSchema(ctx context.Context, userData []byte) (string, error) {
	dir, err := os.MkdirTemp("", "osimage-schema-")
	if err != nil {
		return "", fmt.Errorf("failed to create a directory for the check: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	data := filepath.Join(dir, "user-data")
	if err := os.WriteFile(data, userData, 0o600); err != nil {
		return "", fmt.Errorf("failed to write the user data to check: %w", err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		return "", fmt.Errorf("failed to create the mount point: %w", err)
	}
	// Arguments reach the script as $1.. (never spliced into it): paths with odd characters stay paths.
	const script = `set -e
mount -o loop,ro,offset="$1" "$2" "$3"
mount -t tmpfs -o size=16m tmpfs "$3/tmp"
cp "$4" "$3/tmp/user-data"
exec chroot "$3" cloud-init schema --config-file /tmp/user-data`
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation=private", "sh", "-c", script, "sh",
		strconv.Itoa(rootOffset), img.Raw, root, data)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cloud-init schema refused the data or did not run: %w: %s", err, out)
	}
	return string(out), nil
}
