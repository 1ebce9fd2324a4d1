package disk

import (
	"bufio"
	"context"
	"crypto/md5" //nolint:gosec // Metal3's md5 checksum type; the image integrity, not a signature
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/sys/unix"
)

// Formats the writer accepts (Metal3's image.format).
const (
	FormatRaw   = "raw"
	FormatQcow2 = "qcow2"
)

var (
	// ErrChecksumMismatch is wrapped when the downloaded image does not match its checksum.
	ErrChecksumMismatch = errors.New("image checksum mismatch")
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
		return nil, fmt.Errorf("image url %q is not an http(s) URL", img.URL)
	}
	algo, want, err := w.resolveChecksum(ctx, img, u)
	if err != nil {
		return nil, err
	}
	t, err := openTarget(device)
	if err != nil {
		return nil, err
	}
	defer func() { _ = t.Close() }()
	res := &Result{Device: device, Format: format, ChecksumType: algo, Checksum: want}
	if err := w.write(ctx, t, img.URL, format, algo, want, res); err != nil {
		if errors.Is(err, ErrImageTooLarge) || errors.As(err, new(notStarted)) {
			return nil, fmt.Errorf("failed to write image %s to %s (the disk is untouched): %w", redactURL(u), device, err)
		}
		// The head was never written; make sure the disk's first MiB is zeros, whatever was there before.
		if cerr := t.clearHead(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("failed to write image %s to %s (its first MiB is left zeroed): %w", redactURL(u), device, err)
	}
	t.rereadPartitions()
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

func (w *Writer) write(ctx context.Context, t *target, imageURL, format, algo, want string, res *Result) error {
	body, length, err := w.get(ctx, imageURL)
	if err != nil {
		return notStarted{err}
	}
	defer func() { _ = body.Close() }()
	h := newHash(algo)
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
		if err := verify(h, want); err != nil {
			return err
		}
	case FormatQcow2:
		spool, n, err := w.spool(body, length, h)
		if err != nil {
			return err
		}
		defer func() { _ = spool.Close(); _ = os.Remove(spool.Name()) }()
		res.DownloadedBytes = n
		if err := verify(h, want); err != nil {
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

func (w *Writer) get(ctx context.Context, u string) (io.ReadCloser, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := w.client().Do(req)
	if err != nil {
		// *url.Error repeats the whole URL, query included: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, fmt.Errorf("failed to download %s: %w", redactString(u), err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, 0, fmt.Errorf("failed to download %s: HTTP %s", redactString(u), resp.Status)
	}
	return resp.Body, resp.ContentLength, nil
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

// resolveChecksum returns the algorithm and the expected hex digest. img.Checksum is a digest or an
// http(s) URL of a checksum file ("<hash>" or "<hash>  <file>" lines, as sha256sum writes them).
func (w *Writer) resolveChecksum(ctx context.Context, img metal3v1.Image, imageURL *url.URL) (string, string, error) {
	sum := strings.TrimSpace(img.Checksum)
	if sum == "" {
		return "", "", errors.New("image checksum is empty: an image is written only when it can be verified")
	}
	if strings.HasPrefix(sum, "http://") || strings.HasPrefix(sum, "https://") {
		body, _, err := w.get(ctx, sum)
		if err != nil {
			return "", "", fmt.Errorf("failed to fetch the checksum file: %w", err)
		}
		defer func() { _ = body.Close() }()
		parsed, err := ParseChecksumFile(io.LimitReader(body, 1<<20), path.Base(imageURL.Path))
		if err != nil {
			return "", "", fmt.Errorf("checksum file %s: %w", redactString(sum), err)
		}
		sum = parsed
	}
	algo, err := checksumAlgorithm(string(img.ChecksumType), sum)
	if err != nil {
		return "", "", err
	}
	return algo, strings.ToLower(sum), nil
}

var checksumLengths = map[string]int{"md5": 32, "sha256": 64, "sha512": 128}

// checksumAlgorithm checks the digest against the type; "auto" and "" pick by length (32 md5, 64 sha256,
// 128 sha512). Metal3 documents md5 as the default, which the length rule yields for an md5 digest;
// a longer digest with no type is taken for what its length says rather than refused.
func checksumAlgorithm(typ, sum string) (string, error) {
	if _, err := hex.DecodeString(sum); err != nil {
		return "", fmt.Errorf("image checksum %q is not a hex digest", sum)
	}
	switch typ {
	case "", string(metal3v1.AutoChecksum):
		for algo, n := range checksumLengths {
			if len(sum) == n {
				return algo, nil
			}
		}
		return "", fmt.Errorf("image checksum has %d hex digits: none of md5 (32), sha256 (64), sha512 (128)", len(sum))
	}
	n, ok := checksumLengths[typ]
	if !ok {
		return "", fmt.Errorf("checksumType %q is not one of md5, sha256, sha512, auto", typ)
	}
	if len(sum) != n {
		return "", fmt.Errorf("image checksum has %d hex digits, a %s digest has %d", len(sum), typ, n)
	}
	return typ, nil
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "md5":
		return md5.New() //nolint:gosec // see import
	case "sha512":
		return sha512.New()
	}
	return sha256.New()
}

func verify(h hash.Hash, want string) error {
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: downloaded image has %s, spec.image.checksum says %s", ErrChecksumMismatch, got, want)
	}
	return nil
}

// ParseChecksumFile finds the digest for fileName in a checksum file: a lone "<hash>" line, or
// "<hash>  <name>" / "<hash> *<name>" lines (sha256sum, md5sum), or BSD "SHA256 (<name>) = <hash>" lines.
// Comment (#) and blank lines are skipped. A file with one digest and no names applies to any image.
func ParseChecksumFile(r io.Reader, fileName string) (string, error) {
	sc := bufio.NewScanner(r)
	var bare []string
	var names []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if open := strings.Index(line, " ("); open > 0 && strings.Contains(line, ") = ") {
			rest := line[open+2:]
			name, sum, _ := strings.Cut(rest, ") = ")
			if path.Base(name) == fileName {
				return strings.TrimSpace(sum), nil
			}
			names = append(names, name)
			continue
		}
		sum, name, hasName := strings.Cut(line, " ")
		if !hasName {
			bare = append(bare, sum)
			continue
		}
		name = strings.TrimPrefix(strings.TrimSpace(name), "*")
		if path.Base(name) == fileName {
			return sum, nil
		}
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("failed to read: %w", err)
	}
	if len(bare) == 1 && len(names) == 0 {
		return bare[0], nil
	}
	if len(bare) > 1 {
		return "", fmt.Errorf("has %d digests without file names: cannot tell which is %s's", len(bare), fileName)
	}
	return "", fmt.Errorf("has no digest for %s (it lists %s)", fileName, strings.Join(names, ", "))
}

// redactURL drops user info and the query (pre-signed URLs carry credentials there) before a URL is
// put in an error that ends up in a condition.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "REDACTED"
	}
	return c.String()
}

func redactString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return redactURL(u)
}
