// Package atomicfile writes files so that a reader, a process killed mid-write or a host power-cycled
// mid-write (a MachineHealthCheck's reboot remediation) sees either the old content or the whole new
// content, never a half-written file: the bytes go to a temporary file beside the target — created
// exclusively and 0600, so content holding a secret (a bootstrap token, a kubeconfig) is never readable
// under a wider mode — which is flushed to disk, given its mode and renamed over the target. A failure
// removes the temporary file.
package atomicfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// File is a temporary file that becomes the target on Commit. Write to it like an *os.File.
type File struct {
	*os.File
	target string
	done   bool
}

// Create opens a new temporary file in path's directory (the same filesystem, so the rename is atomic);
// the directory must exist.
func Create(path string) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("failed to write %s: %w", path, err)
	}
	return &File{File: f, target: path}, nil
}

// Commit flushes the file to disk, gives it mode and renames it over the target. On failure the
// temporary file is removed and the target left as it was.
func (f *File) Commit(mode os.FileMode) error {
	if f.done {
		return fmt.Errorf("%s: already committed or aborted", f.target)
	}
	f.done = true
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), f.target)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("failed to write %s: %w", f.target, err)
	}
	return nil
}

// Abort closes and removes the temporary file, leaving the target as it was; after Commit it does
// nothing, so it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = f.Close()
	_ = os.Remove(f.Name())
}

// Write replaces path's content with content and its mode with mode.
func Write(path string, content []byte, mode os.FileMode) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(content); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return f.Commit(mode)
}

// WriteIfChanged writes content with mode to path unless the file already has exactly that content and
// mode; it reports whether it wrote.
func WriteIfChanged(path string, content []byte, mode os.FileMode) (bool, error) {
	if Same(path, content, mode) {
		return false, nil
	}
	if err := Write(path, content, mode); err != nil {
		return false, err
	}
	return true, nil
}

// Same reports whether path is a regular file with exactly content and the permission bits mode.
func Same(path string, content []byte, mode os.FileMode) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != mode.Perm() || st.Size() != int64(len(content)) {
		return false
	}
	cur, err := os.ReadFile(path) //nolint:gosec // the caller's own file
	return err == nil && bytes.Equal(cur, content)
}
