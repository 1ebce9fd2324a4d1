package disk

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/sys/unix"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
)

// Formats the writer accepts (Metal3's image.format).
const (
	FormatRaw   = "raw"
	FormatQcow2 = "qcow2"
)

var (
	// ErrChecksumMismatch is wrapped when the downloaded image does not match its checksum; it is
	// imagechecksum.ErrMismatch, the error every verifier of Metal3 images wraps.
	ErrChecksumMismatch = imagechecksum.ErrMismatch
	// ErrImageTooLarge is wrapped when the image cannot fit on the disk; it is found before any write.
	ErrImageTooLarge = errors.New("image larger than the disk")
)

// notStarted marks a failure found before the disk was touched (the server refused the download, the
// spool has no room); its message is the cause's.
type notStarted struct{ error }

func (e notStarted) Unwrap() error { return e.error }

// Writer writes Metal3 images to a disk.
type Writer struct {
	// Client fetches the image and a checksum URL; nil means http.DefaultClient.
	Client *http.Client
	// SpoolDir holds a qcow2 image while it is converted (default os.TempDir(), the ramdisk's RAM).
	SpoolDir string
}

// Result reports a finished write.
type Result struct {
	Device          string `json:"device"`
	Format          string `json:"format"`
	ChecksumType    string `json:"checksumType"`
	Checksum        string `json:"checksum"`
	DownloadedBytes int64  `json:"downloadedBytes"`
	ImageBytes      int64  `json:"imageBytes"`
	Duration        string `json:"duration"`
}

func (w *Writer) client() *http.Client {
	if w.Client != nil {
		return w.Client
	}
	return http.DefaultClient
}

// Write downloads img and writes it to device (a whole disk, e.g. the one Inventory.Choose returned).
// The checksum is computed over the bytes as they are downloaded. Raw images stream straight to the
// disk; qcow2 images are held in SpoolDir, verified, then converted (see docs/infrastructure-baremetal.md
// for why). The disk ends in one of three states: untouched (bad input, an image that cannot fit, a
// download the server refused), holding the verified image, or — after any other failure, a checksum
// mismatch included — with its first MiB zeroed, so a host never boots a half-written or unverified
// image (nor the previous one, which the operator asked to replace). The first MiB is written last.
func (w *Writer) Write(ctx context.Context, device string, img metal3v1.Image) (*Result, error) {
	start := time.Now()
	format, err := imageFormat(img)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(img.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("image url %s is not an http(s) URL", imagechecksum.RedactString(img.URL))
	}
	if strings.TrimSpace(img.Checksum) == "" {
		return nil, errors.New("image checksum is empty: an image is written only when it can be verified")
	}
	want, err := imagechecksum.Resolve(ctx, w.client(), img)
	if err != nil {
		return nil, err
	}
	t, err := openTarget(device)
	if err != nil {
		return nil, err
	}
	defer func() { _ = t.Close() }()
	res := &Result{Device: device, Format: format, ChecksumType: want.Algorithm, Checksum: want.Hex}
	if err := w.write(ctx, t, img.URL, format, want, res); err != nil {
		if errors.Is(err, ErrImageTooLarge) || errors.As(err, new(notStarted)) {
			return nil, fmt.Errorf("failed to write image %s to %s (the disk is untouched): %w", imagechecksum.RedactURL(u), device, err)
		}
		// The head was never written; make sure the disk's first MiB is zeros, whatever was there before.
		if cerr := t.clearHead(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("failed to write image %s to %s (its first MiB is left zeroed): %w", imagechecksum.RedactURL(u), device, err)
	}
	t.rereadPartitions()
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

func (w *Writer) write(ctx context.Context, t *target, imageURL, format string, want imagechecksum.Expected, res *Result) error {
	body, length, err := imagechecksum.Get(ctx, w.client(), imageURL)
	if err != nil {
		return notStarted{err}
	}
	defer func() { _ = body.Close() }()
	h := want.NewHash()
	switch format {
	case FormatRaw:
		if length > t.size {
			return fmt.Errorf("%w: the raw image is %d bytes (Content-Length), %s has %d", ErrImageTooLarge, length, t.path, t.size)
		}
		if err := t.clearHead(); err != nil {
			return err
		}
		n, err := streamRaw(t, io.TeeReader(body, h))
		res.DownloadedBytes, res.ImageBytes = n, n
		if err != nil {
			return err
		}
		if length >= 0 && n != length {
			return fmt.Errorf("download ended after %d of %d bytes", n, length)
		}
		if err := want.Verify(h); err != nil {
			return err
		}
	case FormatQcow2:
		spool, n, err := w.spool(body, length, h)
		if err != nil {
			return err
		}
		defer func() { _ = spool.Close(); _ = os.Remove(spool.Name()) }()
		res.DownloadedBytes = n
		if err := want.Verify(h); err != nil {
			return err
		}
		q, err := OpenQcow2(spool, n)
		if err != nil {
			return err
		}
		if q.VirtualSize() > t.size {
			return fmt.Errorf("%w: the qcow2 image's virtual size is %d bytes, %s has %d", ErrImageTooLarge, q.VirtualSize(), t.path, t.size)
		}
		res.ImageBytes = q.VirtualSize()
		if err := t.clearHead(); err != nil {
			return err
		}
		if err := q.Walk(func(off, n int64, data []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if data == nil {
				return t.zeroRange(off, n)
			}
			return t.writeAt(data, off)
		}); err != nil {
			return err
		}
	}
	return t.commitHead()
}

// streamRaw copies the image to the disk in order; the caller's reader hashes what it reads.
func streamRaw(t *target, r io.Reader) (int64, error) {
	buf := make([]byte, 4<<20)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if werr := t.writeAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return off, nil
		case err != nil:
			return off, fmt.Errorf("failed to download the image after %d bytes: %w", off, err)
		}
	}
}

// spool writes a qcow2 download to a temporary file while hashing it: the format needs random access
// (tables may follow the clusters they map), and the checksum covers the file as downloaded.
func (w *Writer) spool(body io.Reader, length int64, h hash.Hash) (*os.File, int64, error) {
	dir := w.SpoolDir
	if dir == "" {
		dir = os.TempDir()
	}
	if length > 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil {
			if free := int64(st.Bavail) * st.Bsize; free < length { //nolint:gosec // counts fit int64
				return nil, 0, notStarted{fmt.Errorf("the qcow2 image (%d bytes) does not fit in %s (%d bytes free): give the ramdisk more memory or use a raw image, which streams to the disk", length, dir, free)}
			}
		}
	}
	f, err := os.CreateTemp(dir, "yonder-image-*.qcow2")
	if err != nil {
		return nil, 0, fmt.Errorf("failed to create the qcow2 spool file: %w", err)
	}
	n, err := io.Copy(io.MultiWriter(f, h), body)
	if err == nil && length >= 0 && n != length {
		err = fmt.Errorf("download ended after %d of %d bytes", n, length)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, 0, fmt.Errorf("failed to download the qcow2 image into %s: %w", dir, err)
	}
	return f, n, nil
}

func imageFormat(img metal3v1.Image) (string, error) {
	f := FormatRaw
	if img.DiskFormat != nil && *img.DiskFormat != "" {
		f = *img.DiskFormat
	}
	switch f {
	case FormatRaw, FormatQcow2:
		return f, nil
	}
	return "", fmt.Errorf("image format %q cannot be written to disk: raw and qcow2 can (convert vdi/vmdk with qemu-img; live-iso is booted, not written)", f)
}
