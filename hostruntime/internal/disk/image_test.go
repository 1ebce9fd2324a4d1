package disk

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
)

const (
	testDeviceSize = 16 << 20
	// testImageSize is not a multiple of 64 KiB, so the qcow2's last cluster is partial.
	testImageSize = 8<<20 + 3*512
)

func format(f string) *string { return &f }

// TestWriteRaw streams a raw image to a loop device with each checksum type and a checksum file, and
// checks the device holds the image byte for byte and nothing past it changed.
func TestWriteRaw(t *testing.T) {
	dir := t.TempDir()
	raw := testImage(t, dir)
	data, err := os.ReadFile(raw)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	sha := imagechecksum.Digest("sha256", data)
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte("# release\n"+
		strings.Repeat("0", 64)+"  other.raw\n"+sha+" *image.raw\n"), 0o600)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "image.raw.md5"), []byte(imagechecksum.Digest("md5", data)+"\n"), 0o600)).To(Succeed())
	srv := fileServer(t, dir)
	for _, tc := range []struct{ name, checksum, typ string }{
		{"md5", imagechecksum.Digest("md5", data), "md5"},
		{"sha256", sha, "sha256"},
		{"sha512 auto", imagechecksum.Digest("sha512", data), "auto"},
		{"sha256 no type", strings.ToUpper(sha), ""},
		{"checksum file with names", srv.URL + "/SHA256SUMS", "auto"},
		{"checksum file with a bare digest", srv.URL + "/image.raw.md5", "md5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dev := loopDevice(t, testDeviceSize)
			before := fillRandom(t, dev)
			w := &Writer{Client: srv.Client()}
			res, err := w.Write(context.Background(), dev, metal3v1.Image{
				URL: srv.URL + "/image.raw", Checksum: tc.checksum, ChecksumType: metal3v1.ChecksumType(tc.typ),
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.ImageBytes).To(Equal(int64(testImageSize)))
			g.Expect(res.Format).To(Equal(FormatRaw))
			got := readDev(t, dev)
			g.Expect(bytes.Equal(got[:testImageSize], data)).To(BeTrue(), "the device holds the image")
			g.Expect(bytes.Equal(got[testImageSize:], before[testImageSize:])).To(BeTrue(), "nothing past the image changed")
		})
	}
}

// TestWriteQcow2 converts qcow2 images (v3, v2, compressed, small and large clusters) and compares the
// device with qemu-img's own conversion of the same file.
func TestWriteQcow2(t *testing.T) {
	dir := t.TempDir()
	raw := testImage(t, dir)
	srv := fileServer(t, dir)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"v3", nil},
		{"v3 compressed", []string{"-c"}},
		{"v2 compressed 4k clusters", []string{"-c", "-o", "compat=0.10,cluster_size=4096"}},
		{"v3 2M clusters", []string{"-o", "cluster_size=2M"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := strings.ReplaceAll(tc.name, " ", "-") + ".qcow2"
			q := filepath.Join(dir, name)
			qemuImg(t, append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, tc.args...), raw, q)...)
			want := filepath.Join(t.TempDir(), "want.raw")
			qemuImg(t, "convert", "-f", "qcow2", "-O", "raw", q, want)
			wantData, err := os.ReadFile(want)
			g.Expect(err).NotTo(HaveOccurred())
			qdata, err := os.ReadFile(q)
			g.Expect(err).NotTo(HaveOccurred())

			dev := loopDevice(t, testDeviceSize)
			before := fillRandom(t, dev)
			spool := t.TempDir()
			w := &Writer{Client: srv.Client(), SpoolDir: spool}
			res, err := w.Write(context.Background(), dev, metal3v1.Image{
				URL: srv.URL + "/" + name, Checksum: imagechecksum.Digest("sha256", qdata), ChecksumType: "sha256", DiskFormat: format("qcow2"),
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.ImageBytes).To(Equal(int64(len(wantData))))
			g.Expect(res.DownloadedBytes).To(Equal(int64(len(qdata))))
			got := readDev(t, dev)
			g.Expect(bytes.Equal(got[:len(wantData)], wantData)).To(BeTrue(), "the device holds what qemu-img convert -O raw makes of the image")
			g.Expect(bytes.Equal(got[len(wantData):], before[len(wantData):])).To(BeTrue(), "nothing past the virtual size changed")
			left, err := os.ReadDir(spool)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(BeEmpty(), "the spooled image is removed")
		})
	}
}

// TestWriteFailures: a checksum mismatch leaves the first MiB zeroed; an image that cannot fit and a
// refused download leave the disk untouched; refused formats and checksums fail before anything.
func TestWriteFailures(t *testing.T) {
	dir := t.TempDir()
	raw := testImage(t, dir)
	data, err := os.ReadFile(raw)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	big := filepath.Join(dir, "big.qcow2")
	qemuImg(t, "create", "-f", "qcow2", big, "32M")
	bigData, err := os.ReadFile(big)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "SUMS"), []byte(imagechecksum.Digest("sha256", data)+"  someother.raw\n"), 0o600)).To(Succeed())
	qcow := filepath.Join(dir, "image.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, qcow)
	srv := fileServer(t, dir)
	wrong := strings.Repeat("ab", 32)

	type outcome int
	const (
		untouched outcome = iota
		headZeroed
	)
	for _, tc := range []struct {
		name    string
		dev     int64
		img     metal3v1.Image
		errText string
		disk    outcome
	}{
		{"raw checksum mismatch", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: wrong, ChecksumType: "sha256"},
			"image checksum mismatch: downloaded image has " + imagechecksum.Digest("sha256", data) + ", spec.image.checksum says " + wrong, headZeroed},
		{"qcow2 checksum mismatch", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.qcow2", Checksum: wrong, DiskFormat: format("qcow2")},
			"image checksum mismatch", headZeroed},
		{"raw larger than the disk", 4 << 20, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: imagechecksum.Digest("sha256", data)},
			fmt.Sprintf("(the disk is untouched): image larger than the disk: the raw image is %d bytes (Content-Length)", testImageSize), untouched},
		{"qcow2 virtual size larger than the disk", testDeviceSize, metal3v1.Image{URL: srv.URL + "/big.qcow2?token=secret", Checksum: imagechecksum.Digest("md5", bigData), DiskFormat: format("qcow2")},
			"/big.qcow2?REDACTED to", untouched},
		{"missing image", testDeviceSize, metal3v1.Image{URL: srv.URL + "/nothing.raw", Checksum: wrong},
			"HTTP 404 Not Found", untouched},
		{"checksum file without the image", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: srv.URL + "/SUMS"},
			"has no digest for image.raw (it lists someother.raw)", untouched},
		{"vmdk", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: wrong, DiskFormat: format("vmdk")},
			`image format "vmdk" cannot be written to disk`, untouched},
		{"checksum length", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: wrong, ChecksumType: "md5"},
			"image checksum has 64 hex digits, a md5 digest has 32", untouched},
		{"no checksum", testDeviceSize, metal3v1.Image{URL: srv.URL + "/image.raw"},
			"image checksum is empty", untouched},
		{"not http", testDeviceSize, metal3v1.Image{URL: "file:///etc/passwd", Checksum: wrong},
			"is not an http(s) URL", untouched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dev := loopDevice(t, tc.dev)
			before := fillRandom(t, dev)
			w := &Writer{Client: srv.Client(), SpoolDir: t.TempDir()}
			_, err := w.Write(context.Background(), dev, tc.img)
			g.Expect(err).To(MatchError(ContainSubstring(tc.errText)))
			g.Expect(err.Error()).NotTo(ContainSubstring("secret"), "no URL query in an error")
			got := readDev(t, dev)
			switch tc.disk {
			case untouched:
				g.Expect(bytes.Equal(got, before)).To(BeTrue(), "the disk is untouched")
			case headZeroed:
				g.Expect(err).To(MatchError(ErrChecksumMismatch))
				g.Expect(err).To(MatchError(ContainSubstring("its first MiB is left zeroed")))
				g.Expect(bytes.Count(got[:headBytes], []byte{0})).To(Equal(headBytes), "the first MiB is zeroed")
			}
		})
	}
}

// TestWriteLimits: a qcow2 download larger than the spool's free space is refused before the disk is
// touched (the ramdisk's RAM, here a 1 MiB tmpfs); a raw image sent without Content-Length that turns out
// larger than the disk stops at the disk's end with the first MiB zeroed.
func TestWriteLimits(t *testing.T) {
	dir := t.TempDir()
	raw := testImage(t, dir)
	data, err := os.ReadFile(raw)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	qcow := filepath.Join(dir, "image.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, qcow)
	qdata, err := os.ReadFile(qcow)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	t.Run("spool too small", func(t *testing.T) {
		g := NewWithT(t)
		spool := t.TempDir()
		out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1M", "yonder-disk-test", spool).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		t.Cleanup(func() { _ = exec.Command("umount", spool).Run() })
		srv := fileServer(t, dir)
		dev := loopDevice(t, testDeviceSize)
		before := fillRandom(t, dev)
		w := &Writer{Client: srv.Client(), SpoolDir: spool}
		_, err = w.Write(context.Background(), dev, metal3v1.Image{URL: srv.URL + "/image.qcow2", Checksum: imagechecksum.Digest("sha256", qdata), DiskFormat: format(FormatQcow2)})
		g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("(the disk is untouched): the qcow2 image (%d bytes) does not fit in %s", len(qdata), spool))))
		g.Expect(bytes.Equal(readDev(t, dev), before)).To(BeTrue())
	})
	t.Run("raw without length larger than the disk", func(t *testing.T) {
		g := NewWithT(t)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i < len(data); i += 1 << 20 {
				_, _ = w.Write(data[i:min(i+1<<20, len(data))])
				w.(http.Flusher).Flush() // chunked: no Content-Length
			}
		}))
		t.Cleanup(srv.Close)
		dev := loopDevice(t, 4<<20)
		fillRandom(t, dev)
		w := &Writer{Client: srv.Client()}
		_, err := w.Write(context.Background(), dev, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: imagechecksum.Digest("sha256", data)})
		g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("its first MiB is left zeroed): image data up to byte %d does not fit on %s (%d bytes)", 8<<20, dev, 4<<20))))
		got := readDev(t, dev)
		g.Expect(bytes.Count(got[:headBytes], []byte{0})).To(Equal(headBytes))
	})
}
