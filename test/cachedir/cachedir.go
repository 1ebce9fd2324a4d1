// Package cachedir is where the tests' builds that outlive one run are kept on this machine (OS images,
// boot disks, linked binaries), and the lock that lets one process build an entry while the others wait.
// It is the same root hack/test-bins.sh uses: $YONDER_CACHE_DIR, else $XDG_CACHE_HOME/yonder, else
// ~/.cache/yonder.
package cachedir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Root returns the cache root (not created).
func Root() (string, error) {
	if root := os.Getenv("YONDER_CACHE_DIR"); root != "" {
		return root, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("failed to find the cache directory: %w", err)
	}
	return filepath.Join(base, "yonder"), nil
}

// Lock takes an exclusive lock on the file at path (created if missing) and returns its release. It waits
// while another process holds it: two lanes of make test reaching the same entry at once build it once,
// instead of starving each other with the same build (or writing one file twice). A cancelled ctx stops
// the wait.
func Lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644) //nolint:gosec // the cache's own lock file
	if err != nil {
		return nil, fmt.Errorf("failed to open the cache lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("failed to lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another build holding %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Place puts the file src at dst for a caller to use while the cache keeps src: a hard link where link is
// set and both are on one filesystem, else a copy, with src's permissions. dst is replaced by a rename,
// never written through, so a process still reading the old dst (or a hard link of it elsewhere) keeps
// its file, and dst is never half-written. Hard links suit files nobody writes in place (archives, disk
// images); a binary that `go build` may write again in place is copied.
func Place(src, dst string, link bool) (err error) {
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".place")
	_ = os.Remove(tmp)
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if !link || os.Link(src, tmp) != nil {
		if err := copyFile(src, tmp); err != nil {
			return fmt.Errorf("failed to copy %s to %s: %w", src, dst, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	// rename(2) of a hard link onto another link of the same file does nothing and leaves tmp: dst was
	// already src (placed before), so the extra link goes.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to remove %s: %w", tmp, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src) //nolint:gosec // a file of the cache
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm()) //nolint:gosec // the caller's destination
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
