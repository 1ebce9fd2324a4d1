package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteArchive writes the krew archive of one platform: bin (mode 0755) and the license file (0644) at
// its top level. Headers carry no time, owner or host detail, so the same inputs give the same sha256.
func WriteArchive(out, bin, license string) (rerr error) {
	f, err := os.Create(out) //nolint:gosec // the release build names the archive it writes
	if err != nil {
		return fmt.Errorf("failed to create archive %s: %w", out, err)
	}
	defer func() {
		if err := f.Close(); err != nil && rerr == nil {
			rerr = fmt.Errorf("failed to write archive %s: %w", out, err)
		}
	}()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, e := range []struct {
		path string
		mode int64
	}{{bin, 0o755}, {license, 0o644}} {
		if err := addFile(tw, e.path, e.mode); err != nil {
			return fmt.Errorf("failed to add %s to archive %s: %w", e.path, out, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("failed to write archive %s: %w", out, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("failed to write archive %s: %w", out, err)
	}
	return nil
}

func addFile(tw *tar.Writer, path string, mode int64) error {
	src, err := os.Open(filepath.Clean(path))
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(path), Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
