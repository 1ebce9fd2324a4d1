package liveiso

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
)

// errStalled is the cause of a fetch the image server stopped sending.
var errStalled = errors.New("the image server stopped sending")

// fetched is a downloaded, verified ISO still under its partial name.
type fetched struct {
	partial  string
	size     int64
	sha256   string
	verified bool
}

// startFetch runs a fetch of img for e in the background; c.mu is held.
func (c *Cache) startFetch(e *entry, img metal3v1.Image) {
	ctx, cancel := context.WithCancel(c.ctx)
	e.phase, e.message, e.retryAt = Fetching, "", time.Time{}
	e.cancel = cancel
	e.progress = &progress{verb: "Fetching"}
	e.progress.total.Store(-1)
	c.wg.Go(func() {
		defer cancel()
		start := time.Now()
		log := c.log.WithValues("key", e.key, "url", e.url)
		log.V(1).Info("Fetching live ISO")
		f, err := c.download(ctx, e, img)
		c.finish(e, f, err, start)
	})
}

// finish records a fetch's outcome, making the ISO servable, unless Keep dropped e meanwhile.
func (c *Cache) finish(e *entry, f fetched, err error, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	log := c.log.WithValues("key", e.key, "url", e.url)
	if c.entries[e.key] != e {
		if err == nil {
			_ = c.root.Remove(f.partial)
		}
		log.V(1).Info("Abandoning live ISO fetch: no host uses the image any more")
		return
	}
	e.cancel, e.progress = nil, nil
	if err == nil {
		err = c.commit(f.partial, isoName(e.key))
	}
	if err != nil && c.ctx.Err() != nil {
		e.phase, e.message = Failed, "the live ISO cache is closed"
		return // Close stopped the fetch: not the image server's failure
	}
	if err != nil {
		e.failures++
		e.phase, e.message, e.retryAt = Failed, err.Error(), c.now().Add(backoff(e.failures))
		log.Error(err, "Failed to fetch live ISO", "retryAt", e.retryAt)
		return
	}
	e.phase, e.message, e.size, e.sha256, e.failures = Ready, "", f.size, f.sha256, 0
	log.V(1).Info("Fetched live ISO", "bytes", f.size, "duration", time.Since(start).Round(time.Millisecond).String(), "verified", f.verified)
}

// commit renames a verified partial file to its served name and makes the rename durable, so a
// power loss leaves either no ISO or the whole verified one.
func (c *Cache) commit(partial, name string) error {
	if err := c.root.Rename(partial, name); err != nil {
		_ = c.root.Remove(partial)
		return fmt.Errorf("failed to store the fetched ISO: %w", err)
	}
	d, err := c.root.Open(".")
	if err != nil {
		return nil //nolint:nilerr // the rename happened; only its durability across a power loss is unconfirmed
	}
	_ = d.Sync()
	_ = d.Close()
	return nil
}

// backoff is 30s after the first failure, doubling to at most 10 minutes.
func backoff(failures int) time.Duration {
	d := firstRetry
	for i := 1; i < failures && d < maxRetry; i++ {
		d *= 2
	}
	return min(d, maxRetry)
}

// download fetches img into a new partial file, hashing as it writes, and verifies it. A failure
// removes the file. The fetch fails when the server sends nothing for StallTimeout.
func (c *Cache) download(ctx context.Context, e *entry, img metal3v1.Image) (fetched, error) {
	stall := c.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(stall, func() { cancel(fmt.Errorf("%w for %s", errStalled, stall)) })
	defer timer.Stop()

	want, err := imagechecksum.Resolve(ctx, c.client, img)
	if err != nil {
		return fetched{}, stalled(ctx, fmt.Errorf("failed to resolve the checksum of %s: %w", e.url, err))
	}
	body, length, err := imagechecksum.Get(ctx, c.client, img.URL)
	if err != nil {
		return fetched{}, stalled(ctx, err)
	}
	defer func() { _ = body.Close() }()
	limit := c.maxBytes()
	if length > limit {
		return fetched{}, fmt.Errorf("failed to download %s: the ISO is %d bytes (Content-Length), larger than the cache's limit of %d bytes", e.url, length, limit)
	}
	e.progress.total.Store(length)
	f, err := c.writePartial(e, body, length, want, func() { timer.Reset(stall) })
	return f, stalled(ctx, err)
}

// writePartial copies body (length bytes, -1 when unknown) into a new partial file with the image's
// checksum and sha256 computed on the way, flushes it to disk and verifies it; the file is removed
// unless all of that succeeds.
func (c *Cache) writePartial(e *entry, body io.Reader, length int64, want imagechecksum.Expected, onData func()) (fetched, error) {
	name := fmt.Sprintf(".%s.%d.partial", e.key, c.seq.Add(1))
	file, err := c.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fetched{}, fmt.Errorf("failed to create the cache file for %s: %w", e.url, err)
	}
	sum := sha256.New()
	check := sum
	if !want.IsZero() && want.Algorithm != "sha256" {
		check = want.NewHash()
	}
	limit := c.maxBytes()
	w := io.MultiWriter(file, uniqueHashes(sum, check), e.progress, dataSeen(onData))
	n, err := io.CopyBuffer(w, io.LimitReader(body, limit+1), make([]byte, 1<<20))
	switch {
	case err != nil:
		err = fmt.Errorf("failed to download %s after %d bytes: %w", e.url, n, err)
	case n > limit:
		err = fmt.Errorf("failed to download %s: the ISO is larger than the cache's limit of %d bytes", e.url, limit)
	case length >= 0 && n != length:
		err = fmt.Errorf("failed to download %s: the download ended after %d of %d bytes", e.url, n, length)
	default:
		if err = file.Sync(); err != nil {
			err = fmt.Errorf("failed to write the cache file for %s: %w", e.url, err)
		}
	}
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("failed to write the cache file for %s: %w", e.url, cerr)
	}
	if err == nil {
		if verr := want.Verify(check); verr != nil {
			err = fmt.Errorf("failed to download %s: %w", e.url, verr)
		}
	}
	if err != nil {
		_ = c.root.Remove(name)
		return fetched{}, err
	}
	return fetched{partial: name, size: n, sha256: hex.EncodeToString(sum.Sum(nil)), verified: !want.IsZero()}, nil
}

func (c *Cache) maxBytes() int64 {
	if c.MaxBytes > 0 {
		return c.MaxBytes
	}
	return DefaultMaxBytes
}

// uniqueHashes writes to sum, and to check too when it is another hash.
func uniqueHashes(sum, check hash.Hash) io.Writer {
	if check == sum {
		return sum
	}
	return io.MultiWriter(sum, check)
}

// dataSeen calls f on every write: the stall timer's reset.
type dataSeen func()

func (f dataSeen) Write(b []byte) (int, error) {
	f()
	return len(b), nil
}

// stalled names the stall as the cause of an error that the stall's cancellation caused.
func stalled(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errStalled) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
