package metalboot

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// writeInitramfs packs the tree at root into dst as a gzip-compressed cpio archive in the "newc" format
// the kernel unpacks at boot. It is written here, not with `find | cpio | gzip`, so that no test depends
// on a cpio command (a pipeline whose status is gzip's once swallowed a missing cpio, and the VM then
// panicked on an empty archive ten minutes later). dst appears only complete: it is written beside and
// renamed.
func writeInitramfs(root, dst string) (rerr error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".initramfs-*")
	if err != nil {
		return fmt.Errorf("failed to create the initramfs: %w", err)
	}
	defer func() {
		if rerr != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	zw, err := gzip.NewWriterLevel(buf, gzip.BestSpeed)
	if err != nil {
		return err
	}
	w := &newcWriter{w: zw}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return w.add(path, rel, d)
	})
	if err != nil {
		return fmt.Errorf("failed to pack %s into the initramfs: %w", root, err)
	}
	if err := w.trailer(); err != nil {
		return fmt.Errorf("failed to write the initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("failed to compress the initramfs: %w", err)
	}
	if err := buf.Flush(); err != nil {
		return fmt.Errorf("failed to write the initramfs: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("failed to write the initramfs: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // a boot artifact served to test VMs
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// newcWriter writes cpio "newc" (SVR4, no CRC) entries: a 110-byte ASCII header, the NUL-terminated name and
// the data, each padded to 4 bytes. Every file gets its own inode number, so the kernel never links two.
type newcWriter struct {
	w   io.Writer
	ino uint32
}

// Mode bits of a cpio entry (the same as st_mode's).
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
)

func (c *newcWriter) add(path, name string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	perm := uint32(info.Mode().Perm())
	switch {
	case d.IsDir():
		return c.entry(name, cpioDir|perm, nil, 2)
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		return c.entry(name, cpioSymlink|0o777, []byte(target), 1)
	case info.Mode().IsRegular():
		data, err := os.ReadFile(path) //nolint:gosec // files of the tree Build assembled
		if err != nil {
			return err
		}
		return c.entry(name, cpioRegular|perm, data, 1)
	default:
		return fmt.Errorf("%s: only directories, regular files and symlinks go into the initramfs, not %s", path, info.Mode().Type())
	}
}

func (c *newcWriter) trailer() error { return c.entry("TRAILER!!!", 0, nil, 1) }

func (c *newcWriter) entry(name string, mode uint32, data []byte, nlink uint32) error {
	c.ino++
	ino := c.ino
	if name == "TRAILER!!!" {
		ino = 0
	}
	// Fields: magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	// namesize (with its NUL), check. Owner root, mtime 0: the archive depends only on the tree's contents.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(c.w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := c.pad(len(hdr) + len(name) + 1); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	return c.pad(len(data))
}

func (c *newcWriter) pad(n int) error {
	if r := n % 4; r != 0 {
		_, err := c.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
