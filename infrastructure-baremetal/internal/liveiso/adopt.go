package liveiso

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// adopt removes the partial files an interrupted fetch left and takes over the ISOs a previous run
// fetched: a "<key>.iso" file was renamed there only after it was verified, so it is whole; its size
// and SHA256 are read in the background, and it is Ready from then on.
func (c *Cache) adopt() error {
	f, err := c.root.Open(".")
	if err != nil {
		return fmt.Errorf("failed to read live ISO cache directory: %w", err)
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("failed to read live ISO cache directory: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		if strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".partial") {
			if err := c.root.Remove(name); err != nil {
				return fmt.Errorf("failed to remove the interrupted fetch %s: %w", name, err)
			}
			continue
		}
		if k, ok := keyOf(name); ok {
			e := &entry{key: k}
			c.entries[k] = e
			c.startCheck(e)
		}
	}
	return nil
}

// startCheck reads an adopted file in the background for its size and SHA256; c.mu is held. A file
// that cannot be read is removed and forgotten, so the next Ensure fetches the image again.
func (c *Cache) startCheck(e *entry) {
	ctx, cancel := context.WithCancel(c.ctx)
	e.phase, e.cancel = Fetching, cancel
	e.progress = &progress{verb: "Reading"}
	e.progress.total.Store(-1)
	c.wg.Go(func() {
		defer cancel()
		size, sum, err := c.hashFile(ctx, e)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[e.key] != e {
			return
		}
		e.cancel, e.progress = nil, nil
		if err != nil {
			delete(c.entries, e.key)
			_ = c.root.Remove(isoName(e.key))
			c.log.Error(err, "Failed to read a cached live ISO: removed it, the image will be fetched again", "key", e.key)
			return
		}
		e.phase, e.size, e.sha256 = Ready, size, sum
		c.log.V(1).Info("Adopted cached live ISO", "key", e.key, "bytes", size)
	})
}

func (c *Cache) hashFile(ctx context.Context, e *entry) (int64, string, error) {
	f, err := c.root.Open(isoName(e.key))
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err == nil {
		e.progress.total.Store(fi.Size())
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, e.progress), ctxReader{ctx, f})
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a read of a large file when ctx ends (Keep dropped the image, or Close).
type ctxReader struct {
	ctx context.Context
	f   *os.File
}

func (r ctxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.f.Read(b)
}
