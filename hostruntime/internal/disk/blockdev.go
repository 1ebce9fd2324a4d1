package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// headBytes is held back while an image is written and written last, once the checksum matched: until
// then the disk's first MiB (MBR, GPT header, boot loader) is zeros, so an interrupted or rejected write
// never leaves a disk that firmware would try to boot.
const headBytes = 1 << 20

// target is an opened block device (or, for tests of the byte logic, a regular file).
type target struct {
	f    *os.File
	path string
	size int64
	head []byte
	zero []byte
}

// openTarget opens the device exclusively: O_EXCL on a block device fails while it is mounted or held by
// the kernel (a mounted partition, a RAID member), so the ramdisk never writes under a live filesystem.
func openTarget(path string) (*target, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0) //nolint:gosec // the operator or the chosen disk
	if err != nil {
		return nil, fmt.Errorf("failed to open %s exclusively (mounted or in use?): %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("failed to read the size of %s: %w", path, err)
	}
	return &target{f: f, path: path, size: size}, nil
}

func (t *target) Close() error { return t.f.Close() }

// writeAt writes p at off, keeping the part below headBytes in memory for commitHead.
func (t *target) writeAt(p []byte, off int64) error {
	if off+int64(len(p)) > t.size {
		return fmt.Errorf("image data up to byte %d does not fit on %s (%d bytes)", off+int64(len(p)), t.path, t.size)
	}
	if off < headBytes {
		n := min(int64(len(p)), headBytes-off)
		if t.head == nil {
			t.head = make([]byte, min(headBytes, t.size))
		}
		copy(t.head[off:], p[:n])
		p, off = p[n:], off+n
	}
	if len(p) == 0 {
		return nil
	}
	if _, err := t.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("failed to write %s at offset %d: %w", t.path, off, err)
	}
	return nil
}

// zeroRange makes [off, off+n) read as zeros: BLKZEROOUT lets the device do it (a loop device punches a
// hole, many SSDs unmap) and falls back to writing zeros where the ioctl is refused.
func (t *target) zeroRange(off, n int64) error {
	if off+n > t.size {
		return fmt.Errorf("image data up to byte %d does not fit on %s (%d bytes)", off+n, t.path, t.size)
	}
	if off < headBytes {
		k := min(n, headBytes-off)
		if t.head != nil {
			clear(t.head[off : off+k])
		}
		off, n = off+k, n-k
	}
	if n == 0 {
		return nil
	}
	if off%512 == 0 && n%512 == 0 {
		r := [2]uint64{uint64(off), uint64(n)}                                                                               //nolint:gosec // non-negative
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, t.f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r))); errno == 0 { //nolint:gosec // BLKZEROOUT takes a pointer to its range
			return nil
		}
	}
	return t.writeZeros(off, n)
}

func (t *target) writeZeros(off, n int64) error {
	if t.zero == nil {
		t.zero = make([]byte, 4<<20)
	}
	for n > 0 {
		k := min(n, int64(len(t.zero)))
		if _, err := t.f.WriteAt(t.zero[:k], off); err != nil {
			return fmt.Errorf("failed to zero %s at offset %d: %w", t.path, off, err)
		}
		off, n = off+k, n-k
	}
	return nil
}

// clearHead zeros the disk's first MiB on the device itself (before writing, and after a failure).
func (t *target) clearHead() error {
	n := min(int64(headBytes), t.size)
	if err := t.writeZeros(0, n); err != nil {
		return err
	}
	return t.flush()
}

// commitHead writes the held-back first MiB: the last write of a verified image.
func (t *target) commitHead() error {
	if t.head != nil {
		if _, err := t.f.WriteAt(t.head, 0); err != nil {
			return fmt.Errorf("failed to write the first MiB of %s: %w", t.path, err)
		}
	}
	return t.flush()
}

// flush makes the data durable and drops the kernel's buffers of the device, so the next reader (the
// kernel's partition scan, the next boot) sees the disk, not a cache; then asks the kernel to re-read the
// partition table. Regular files (tests of the byte logic) answer ENOTTY, which is fine.
func (t *target) flush() error {
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", t.path, err)
	}
	if err := ioctlNoArg(t.f, unix.BLKFLSBUF); err != nil && !errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("failed to flush the buffers of %s: %w", t.path, err)
	}
	return nil
}

// rereadPartitions asks the kernel to re-read the partition table. A loop device without partition
// scanning answers EINVAL and a disk with a mounted partition EBUSY: neither is an error for the caller,
// whose bytes are on the disk; the next boot reads them.
func (t *target) rereadPartitions() {
	_ = ioctlNoArg(t.f, unix.BLKRRPART)
}

func ioctlNoArg(f *os.File, req uint) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), 0); errno != 0 {
		return errno
	}
	return nil
}
