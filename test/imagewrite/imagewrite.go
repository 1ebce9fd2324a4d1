// Package imagewrite puts a bare-metal host's image write rate next to well-known tools writing the same
// image in the same run (issue #16): the rate the provisioning ramdisk reported for its write, `qemu-img
// convert` of the same qcow2 to raw, and `dd` of that raw form. The QEMU end-to-end tests log the three
// figures in one line; nothing asserts on them (TESTING.md: speed is measured and printed, not asserted).
//
// What each figure covers, so the line is read right:
//   - host: the ramdisk's whole write as it reports it (the host controller records the report in
//     baremetalhost.ReportAnnotation): download over HTTP into its tmpfs, checksum, qcow2 walk, buffered
//     writes of the allocated clusters to the virtio disk (BLKZEROOUT for the rest), one fsync. The bytes
//     are the image's raw size. It runs under QEMU's software emulation (TCG).
//   - qemu-img convert: qcow2 → sparse raw file on the host machine, `-t writeback` so the output is
//     flushed once at the end like the ramdisk's (its default output cache mode never flushes, which
//     measures the page cache instead of the disk).
//   - dd: the raw form copied with `bs=4M conv=fsync`: buffered 4 MiB writes and one fsync, as the ramdisk
//     writes (not oflag=direct, which the ramdisk does not use). dd writes every byte, zeros included,
//     where the ramdisk and qemu-img skip unallocated clusters: the plain sequential-write baseline.
package imagewrite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
)

// Rate is a number of bytes written in a time.
type Rate struct {
	Bytes    int64
	Duration time.Duration
}

// MiBPerSecond is the rate in MiB/s (0 for a zero duration).
func (r Rate) MiBPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / (1 << 20) / r.Duration.Seconds()
}

// HostRate reads the image write that h's provisioning ramdisk reported (the report annotation the host
// controller records): its bytes (the image's raw size) and duration. It fails unless the report is a
// successful image write with bytes and a duration.
func HostRate(h *metal3v1.BareMetalHost) (Rate, baremetalhost.ReportRecord, error) {
	var rep baremetalhost.ReportRecord
	raw, ok := h.Annotations[baremetalhost.ReportAnnotation]
	if !ok {
		return Rate{}, rep, fmt.Errorf("BareMetalHost %s has no %s annotation: no ramdisk report", h.Name, baremetalhost.ReportAnnotation)
	}
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		return Rate{}, rep, fmt.Errorf("failed to read the ramdisk report of BareMetalHost %s: %w", h.Name, err)
	}
	if !rep.Success || rep.Action != wire.ActionWriteImage {
		return Rate{}, rep, fmt.Errorf("BareMetalHost %s's ramdisk report is not a written image (action %q, success %t): %s", h.Name, rep.Action, rep.Success, rep.Message)
	}
	d, err := time.ParseDuration(rep.Duration)
	if err != nil {
		return Rate{}, rep, fmt.Errorf("failed to read the duration of BareMetalHost %s's image write: %w", h.Name, err)
	}
	if rep.Bytes <= 0 || d <= 0 {
		return Rate{}, rep, fmt.Errorf("BareMetalHost %s's ramdisk reported %d bytes in %s: nothing measured", h.Name, rep.Bytes, d)
	}
	return Rate{Bytes: rep.Bytes, Duration: d}, rep, nil
}

// Baselines are the same image written by well-known tools on the machine the test runs on.
type Baselines struct {
	// Convert is `qemu-img convert -t writeback -f qcow2 -O raw` of the image; Bytes is the raw size.
	Convert Rate
	// DD is `dd bs=4M conv=fsync` of Convert's output; Bytes is what dd copied.
	DD Rate
}

// Measure times qemu-img convert of the qcow2 image to raw and dd of that raw form, both into a temporary
// directory under dir (put dir on the image's filesystem, so the figures compare writes to one disk), and
// removes both files before it returns. It fails if a command fails or writes nothing.
func Measure(ctx context.Context, qcow2, dir string) (_ Baselines, err error) {
	tmp, err := os.MkdirTemp(dir, "image-write-")
	if err != nil {
		return Baselines{}, fmt.Errorf("failed to create the baselines' directory: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("failed to remove the baselines' files: %w", rerr))
		}
	}()
	var b Baselines
	raw := filepath.Join(tmp, "converted.raw")
	if b.Convert.Duration, err = timed(ctx, "qemu-img", "convert", "-t", "writeback", "-f", "qcow2", "-O", "raw", qcow2, raw); err != nil {
		return b, err
	}
	if b.Convert.Bytes, err = size(raw); err != nil {
		return b, err
	}
	copied := filepath.Join(tmp, "dd.raw")
	if b.DD.Duration, err = timed(ctx, "dd", "if="+raw, "of="+copied, "bs=4M", "conv=fsync", "status=none"); err != nil {
		return b, err
	}
	if b.DD.Bytes, err = size(copied); err != nil {
		return b, err
	}
	return b, nil
}

// timed runs a command and returns how long it took.
func timed(ctx context.Context, name string, args ...string) (time.Duration, error) {
	start := time.Now()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("failed to run %s %v: %w: %s", name, args, err, out)
	}
	return d, nil
}

// size returns a written file's length, which must not be zero.
func size(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("failed to stat %s: %w", path, err)
	}
	if fi.Size() == 0 {
		return 0, fmt.Errorf("%s is empty: nothing was written", path)
	}
	return fi.Size(), nil
}

// Line is the log line that puts the host's rate next to the baselines.
func Line(host Rate, b Baselines) string {
	return fmt.Sprintf("image write: host %.1f MiB/s (%d MiB in %s), qemu-img convert %.1f MiB/s, dd %.1f MiB/s — same image, same run",
		host.MiBPerSecond(), host.Bytes>>20, host.Duration, b.Convert.MiBPerSecond(), b.DD.MiBPerSecond())
}
