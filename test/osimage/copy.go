package osimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CopyRun is one run in a throwaway writable copy of the image's root filesystem (Image.RunInCopy).
type CopyRun struct {
	// Files are placed in the copy before Command runs (missing parent directories are created 0755,
	// existing ones keep their mode), owned by root.
	Files []File
	// Command is run by the copy's /bin/sh -c, chrooted into the copy, as root, with a clean environment
	// (PATH, HOME=/root, LANG=C.UTF-8) and stdin from /dev/null.
	Command string
	// Report, when set, is run the same way after Command in the same copy, whatever Command's status:
	// its stdout is how the caller gets results out (a manifest of files, their modes and contents).
	Report string
}

// File is one file placed in an image (Options.Files) or in a copy of one (CopyRun.Files).
type File struct {
	// Path is absolute and clean, inside the image or the copy.
	Path string
	// Mode holds permission bits only.
	Mode os.FileMode
	// Content is the file's content, unless Source is set (neither: an empty file).
	Content []byte
	// Source is the absolute path of a regular file on this machine whose content the file gets, instead
	// of Content: large binaries (a kubelet) are copied from where they are, not held in memory.
	Source string
}

// CopyResult is what a run in a copy left.
type CopyResult struct {
	// Status is Command's exit status and Output its stdout and stderr, interleaved.
	Status int
	Output []byte
	// Report is Report's stdout.
	Report []byte
}

// copyScript builds the copy and runs the commands in it. It runs in new mount, UTS, IPC, network and
// PID namespaces (unshare): the mounts, the loop device, a hostname cloud-init sets and every process the
// commands leave behind end with it, even if the caller dies. Arguments reach it as $1.. (never spliced
// into it): dir raw offset command report, then src dst mode for each file.
const copyScript = `set -eu
d=$1 raw=$2 off=$3 cmd=$4 report=$5
shift 5
r=$d/root
mkdir "$d/lower" "$d/rw" "$r"
# The loop device reads the image through a file of this run (a bind mount), so that losetup names the
# run's directory as its backing file: a leak would be traceable, and checks for loop devices on the
# image itself (CloudInitSchema's) are not confused by copies running at the same time.
: >"$d/disk"
mount --bind "$raw" "$d/disk"
mount -o loop,ro,offset="$off" "$d/disk" "$d/lower"
mount -t tmpfs -o size=512m,mode=0755 tmpfs "$d/rw"
mkdir "$d/rw/upper" "$d/rw/work"
mount -t overlay -o "lowerdir=$d/lower,upperdir=$d/rw/upper,workdir=$d/rw/work" overlay "$r"
mount -t proc proc "$r/proc"
mount -t tmpfs -o mode=0755,size=64m tmpfs "$r/run"
# A /dev of its own: no /dev/console, so nothing run in the copy writes to this machine's console.
mount -t tmpfs -o mode=0755,size=1m tmpfs "$r/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
	IFS=: read -r name maj min <<EOF
$n
EOF
	mknod -m 0666 "$r/dev/$name" c "$maj" "$min"
done
mkdir "$r/dev/pts" "$r/dev/shm"
ln -s /proc/self/fd "$r/dev/fd"
ln -s /proc/self/fd/0 "$r/dev/stdin"
ln -s /proc/self/fd/1 "$r/dev/stdout"
ln -s /proc/self/fd/2 "$r/dev/stderr"
ip link set lo up 2>/dev/null || true
while [ $# -ge 3 ]; do
	install -D -m "$3" "$1" "$r$2"
	shift 3
done
in_copy() {
	env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		chroot "$r" /bin/sh -c "$1" </dev/null
}
status=0
in_copy "$cmd" >"$d/output" 2>&1 || status=$?
echo "$status" >"$d/status"
if [ -n "$report" ]; then in_copy "$report" >"$d/report"; fi
`

// RunInCopy runs run.Command in a writable copy of the image's root filesystem that exists only for
// this run: the raw image is mounted read-only (never written) with an overlayfs on top whose changes
// live in a tmpfs, with its own /proc, /run (tmpfs) and a minimal /dev, inside private namespaces that
// take every mount, the loop device and any process left behind with them when the run ends. Nothing
// boots: the commands run chrooted, so they are the image's own programs (its cloud-init, shell,
// coreutils) on the image's files. Needs root.
//
// err is not nil when the copy could not be made, Report failed, or ctx ended; Command's own failure is
// reported by the result's Status.
func (img Image) RunInCopy(ctx context.Context, run CopyRun) (CopyResult, error) {
	dir, err := os.MkdirTemp("", "osimage-copy-")
	if err != nil {
		return CopyResult{}, fmt.Errorf("failed to create a directory for the copy: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// overlayfs takes its directories in a comma- and colon-separated option.
	if strings.ContainsAny(dir, ",:\\") {
		return CopyResult{}, fmt.Errorf("the temporary directory %s has a character overlayfs options cannot carry (set TMPDIR)", dir)
	}
	args := []string{"--mount", "--propagation=private", "--uts", "--ipc", "--net", "--pid", "--fork", "--kill-child",
		"sh", "-c", copyScript, "sh", dir, img.Raw, strconv.Itoa(rootOffset), run.Command, run.Report}
	staged, err := stageFiles(dir, run.Files)
	if err != nil {
		return CopyResult{}, err
	}
	cmd := exec.CommandContext(ctx, "unshare", append(args, staged...)...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return CopyResult{}, fmt.Errorf("failed to run in a copy of %s: %w: %s", img.Raw, err, out)
	}
	var res CopyResult
	status, err := os.ReadFile(filepath.Join(dir, "status")) //nolint:gosec // the run's own temporary directory
	if err != nil {
		return CopyResult{}, fmt.Errorf("the run in a copy of %s left no status: %w: %s", img.Raw, err, out)
	}
	if res.Status, err = strconv.Atoi(strings.TrimSpace(string(status))); err != nil {
		return CopyResult{}, fmt.Errorf("the run in a copy of %s left status %q", img.Raw, status)
	}
	if res.Output, err = os.ReadFile(filepath.Join(dir, "output")); err != nil { //nolint:gosec // the run's own temporary directory
		return CopyResult{}, err
	}
	if run.Report != "" {
		if res.Report, err = os.ReadFile(filepath.Join(dir, "report")); err != nil { //nolint:gosec // the run's own temporary directory
			return CopyResult{}, err
		}
	}
	return res, nil
}

// stageFiles writes the files to place under dir/files and returns the script's src dst mode arguments.
func stageFiles(dir string, files []File) ([]string, error) {
	if len(files) == 0 {
		return nil, nil
	}
	src := filepath.Join(dir, "files")
	if err := os.Mkdir(src, 0o700); err != nil {
		return nil, fmt.Errorf("failed to stage the files for the copy: %w", err)
	}
	var args []string
	for i, f := range files {
		if err := f.validate(); err != nil {
			return nil, fmt.Errorf("failed to place a file in the copy: %w", err)
		}
		// The script installs a Source file from where it is: it sees this machine's files.
		if f.Source != "" {
			args = append(args, f.Source, f.Path, fmt.Sprintf("%04o", f.Mode))
			continue
		}
		p := filepath.Join(src, strconv.Itoa(i))
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			return nil, fmt.Errorf("failed to stage %s for the copy: %w", f.Path, err)
		}
		args = append(args, p, f.Path, fmt.Sprintf("%04o", f.Mode))
	}
	return args, nil
}

// extractScript copies the root filesystem out of the raw image: mounted read-only through a loop device
// in a mount namespace of its own, so the mount and the loop device (autoclear) go when it ends, whatever
// happens to the caller. Arguments: raw offset dst.
const extractScript = `set -eu
raw=$1 off=$2 dst=$3
m=$(mktemp -d)
mount -o loop,ro,offset="$off" "$raw" "$m"
cp -a "$m/." "$dst/"
umount "$m"
rmdir "$m"
`

// ExtractRoot copies the image's root filesystem into dst (created if missing), owners, modes and links
// kept: a tree that systemd-nspawn --boot boots as the image would boot on a machine (test/hosts'
// cloud-image hosts). The raw image is only read. Needs root.
func (img Image) ExtractRoot(ctx context.Context, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil { //nolint:gosec // a root filesystem's top directory
		return fmt.Errorf("failed to create %s: %w", dst, err)
	}
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation=private", "sh", "-c", extractScript, "sh",
		img.Raw, strconv.Itoa(rootOffset), dst)
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to copy the root filesystem of %s into %s: %w: %s", img.Raw, dst, err, out)
	}
	return nil
}
