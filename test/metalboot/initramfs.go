package metalboot

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/pkg/atomicfile"
	"github.com/yonder-dev/yonder/pkg/newc"
)

// writeInitramfs packs the tree at root into dst as a gzip-compressed cpio archive in the "newc" format
// the kernel unpacks at boot. It is written here, not with `find | cpio | gzip`, so that no test depends
// on a cpio command (a pipeline whose status is gzip's once swallowed a missing cpio, and the VM then
// panicked on an empty archive ten minutes later). dst appears only complete: it is written beside and
// renamed.
func writeInitramfs(root, dst string) error {
	tmp, err := atomicfile.Create(dst)
	if err != nil {
		return fmt.Errorf("failed to create the initramfs: %w", err)
	}
	defer tmp.Abort()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	zw, err := gzip.NewWriterLevel(buf, gzip.BestSpeed)
	if err != nil {
		return err
	}
	w := newc.NewWriter(zw)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return add(w, path, rel, d)
	})
	if err != nil {
		return fmt.Errorf("failed to pack %s into the initramfs: %w", root, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("failed to write the initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("failed to compress the initramfs: %w", err)
	}
	if err := buf.Flush(); err != nil {
		return fmt.Errorf("failed to write the initramfs: %w", err)
	}
	return tmp.Commit(0o644) // a boot artifact served to test VMs
}

// add packs one entry of the tree.
func add(w *newc.Writer, path, name string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	perm := uint32(info.Mode().Perm())
	switch {
	case d.IsDir():
		return w.Dir(name, perm)
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		return w.Symlink(name, target)
	case info.Mode().IsRegular():
		data, err := os.ReadFile(path) //nolint:gosec // files of the tree Build assembled
		if err != nil {
			return err
		}
		return w.File(name, perm, data)
	default:
		return fmt.Errorf("%s: only directories, regular files and symlinks go into the initramfs, not %s", path, info.Mode().Type())
	}
}

// WriteInitramfs packs the tree at root into dst as the gzip-compressed newc cpio archive a kernel unpacks
// as its initramfs (see writeInitramfs). Exported for the other boot images of the tests (test/bootdisk's
// disk-booted initramfs), so that every one is written the same way without a cpio command.
func WriteInitramfs(root, dst string) error { return writeInitramfs(root, dst) }
