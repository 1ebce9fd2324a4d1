// Package newc writes cpio archives in the "newc" (SVR4, no CRC) format, the one the Linux kernel unpacks
// as an initramfs. Yonder writes its own rather than running a cpio command: the provisioning boot image is
// packed by it, and the bare-metal boot server serves its public key as a small archive the kernel unpacks
// over the boot image's (the kernel accepts several archives one after the other).
package newc

import (
	"fmt"
	"io"
	"strings"
)

// Mode bits of an entry's type (the same as st_mode's).
const (
	typeDir     = 0o040000
	typeRegular = 0o100000
	typeSymlink = 0o120000
)

const trailerName = "TRAILER!!!"

// Writer writes entries to an archive: a 110-byte ASCII header, the NUL-terminated name and the data, each
// padded to 4 bytes. Every entry gets its own inode number (the kernel never links two), owner root and
// mtime 0, so an archive depends only on what is added. Close writes the trailer.
type Writer struct {
	w   io.Writer
	ino uint32
}

// NewWriter writes an archive to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Dir adds a directory.
func (c *Writer) Dir(name string, perm uint32) error {
	return c.entry(name, typeDir|perm&0o7777, nil, 2)
}

// File adds a regular file.
func (c *Writer) File(name string, perm uint32, data []byte) error {
	return c.entry(name, typeRegular|perm&0o7777, data, 1)
}

// Symlink adds a symbolic link to target.
func (c *Writer) Symlink(name, target string) error {
	return c.entry(name, typeSymlink|0o777, []byte(target), 1)
}

// Close writes the trailer that ends the archive (it does not close the underlying writer).
func (c *Writer) Close() error { return c.entry(trailerName, 0, nil, 1) }

func (c *Writer) entry(name string, mode uint32, data []byte, nlink uint32) error {
	if name == "" || strings.Contains(name, "\x00") || (name == trailerName && mode != 0) {
		return fmt.Errorf("cpio entry name %q is not allowed", name)
	}
	c.ino++
	ino := c.ino
	if name == trailerName {
		ino = 0
	}
	// Fields: magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	// namesize (with its NUL), check.
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

func (c *Writer) pad(n int) error {
	if r := n % 4; r != 0 {
		_, err := c.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
