// Package imagechecksum resolves and checks a Metal3 image's checksum (spec.image.checksum and
// checksumType): a hex digest, or the http(s) URL of a checksum file such as SHA256SUMS. Both the
// ramdisk that writes disk images and the boot server that serves live ISOs verify what they fetch
// with it, so an image is held to one rule wherever it is used. It also keeps URL credentials (user
// info, pre-signed query strings) out of the errors it returns, which end up in conditions and logs.
package imagechecksum

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
	"path"
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

// ErrMismatch is wrapped when the bytes fetched do not match the image's checksum.
var ErrMismatch = errors.New("image checksum mismatch")

// maxChecksumFile bounds what is read of a checksum file: a release's SHA256SUMS is a few KiB.
const maxChecksumFile = 1 << 20

// Expected is the digest an image must have. The zero value means the image names no checksum:
// nothing to verify.
type Expected struct {
	// Algorithm is md5, sha256 or sha512; "" when the image names no checksum.
	Algorithm string
	// Hex is the lower-case hex digest.
	Hex string
}

// IsZero reports whether there is nothing to verify (the image names no checksum).
func (e Expected) IsZero() bool { return e.Algorithm == "" }

// NewHash returns a hash of e's algorithm to feed the image's bytes to; sha256 when e is zero.
func (e Expected) NewHash() hash.Hash {
	switch e.Algorithm {
	case "md5":
		return md5.New() //nolint:gosec // see import
	case "sha512":
		return sha512.New()
	}
	return sha256.New()
}

// Digest is the hex digest of b by algorithm (md5, sha256 or sha512; anything else is sha256, as NewHash),
// the form spec.image.checksum holds.
func Digest(algorithm string, b []byte) string {
	h := Expected{Algorithm: algorithm}.NewHash()
	_, _ = h.Write(b) // a hash.Hash's Write never fails
	return hex.EncodeToString(h.Sum(nil))
}

// Verify compares the digest h computed (from NewHash) with e, wrapping ErrMismatch with both digests
// when they differ. A zero e verifies anything.
func (e Expected) Verify(h hash.Hash) error {
	if e.IsZero() {
		return nil
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.Hex {
		return fmt.Errorf("%w: downloaded image has %s, spec.image.checksum says %s", ErrMismatch, got, e.Hex)
	}
	return nil
}

// IsURL reports whether a checksum names a checksum file to fetch rather than being a digest.
func IsURL(checksum string) bool {
	s := strings.TrimSpace(checksum)
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// Resolve returns the digest img must have. img.Checksum is a hex digest, or an http(s) URL of a
// checksum file ("<hash>" or "<hash>  <file>" lines, as sha256sum writes them, or BSD lines) in which
// the entry named like img.URL's last path element is taken. c fetches that file (nil means
// http.DefaultClient); only then is the network used. An image without a checksum resolves to the zero
// Expected: whether that is acceptable is the caller's decision.
func Resolve(ctx context.Context, c *http.Client, img metal3v1.Image) (Expected, error) {
	sum := strings.TrimSpace(img.Checksum)
	if sum == "" {
		return Expected{}, nil
	}
	if IsURL(sum) {
		u, err := url.Parse(img.URL)
		if err != nil {
			return Expected{}, errors.New("image url is not a URL: cannot find its entry in the checksum file")
		}
		if sum, err = fetchChecksumFile(ctx, c, sum, path.Base(u.Path)); err != nil {
			return Expected{}, err
		}
	}
	algo, err := algorithm(string(img.ChecksumType), sum)
	if err != nil {
		return Expected{}, err
	}
	return Expected{Algorithm: algo, Hex: strings.ToLower(sum)}, nil
}

func fetchChecksumFile(ctx context.Context, c *http.Client, fileURL, imageName string) (string, error) {
	body, _, err := Get(ctx, c, fileURL)
	if err != nil {
		return "", fmt.Errorf("failed to fetch the checksum file: %w", err)
	}
	defer func() { _ = body.Close() }()
	sum, err := ParseChecksumFile(io.LimitReader(body, maxChecksumFile), imageName)
	if err != nil {
		return "", fmt.Errorf("checksum file %s: %w", RedactString(fileURL), err)
	}
	return sum, nil
}

var checksumLengths = map[string]int{"md5": 32, "sha256": 64, "sha512": 128}

// algorithm checks the digest against the type; "auto" and "" pick by length (32 md5, 64 sha256,
// 128 sha512). Metal3 documents md5 as the default, which the length rule yields for an md5 digest;
// a longer digest with no type is taken for what its length says rather than refused.
func algorithm(typ, sum string) (string, error) {
	if _, err := hex.DecodeString(sum); err != nil {
		if strings.Contains(sum, "://") { // a URL of another scheme: may carry credentials
			return "", fmt.Errorf("image checksum %s is neither a hex digest nor an http(s) URL", RedactString(sum))
		}
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
