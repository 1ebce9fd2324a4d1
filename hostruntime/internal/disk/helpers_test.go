package disk

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/testbins"
)

// loopDevice attaches a new sparse file of size bytes to a free loop device and detaches it when the test
// ends. Every test gets its own file and device.
func loopDevice(t testing.TB, size int64) string {
	t.Helper()
	g := NewWithT(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	g.Expect(os.WriteFile(img, nil, 0o600)).To(Succeed())
	g.Expect(os.Truncate(img, size)).To(Succeed())
	return attach(t, img)
}

func attach(t testing.TB, img string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	detachAtCleanup(t, dev, img)
	return dev
}

// detachAtCleanup detaches dev when the test ends, if it still maps img. A test that detached it
// already may find the number taken by another test process (loop numbers are reused at once): detaching
// by name then would pull that process's device from under it.
func detachAtCleanup(t testing.TB, dev, img string) {
	t.Helper()
	t.Cleanup(func() {
		out, err := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", "--list", dev).Output()
		if err == nil && strings.TrimSpace(string(out)) == img {
			_ = exec.Command("losetup", "--detach", dev).Run()
		}
	})
}

func detach(t testing.TB, dev string) {
	t.Helper()
	if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
		t.Fatalf("losetup --detach %s: %v: %s", dev, err, out)
	}
}

// fillRandom overwrites the whole device with random bytes, so a test sees what the writer left alone.
func fillRandom(t testing.TB, dev string) []byte {
	t.Helper()
	g := NewWithT(t)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(f.Close()).To(Succeed()) }()
	size, err := f.Seek(0, 2)
	g.Expect(err).NotTo(HaveOccurred())
	b := make([]byte, size)
	_, _ = rand.Read(b)
	_, err = f.WriteAt(b, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Sync()).To(Succeed())
	return b
}

func readDev(t testing.TB, dev string) []byte {
	t.Helper()
	b, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	p, err := testbins.LookPath("qemu-img")
	if err != nil {
		t.Fatal(err)
	}
	// QEMU's LUKS key setup benchmarks PBKDF2 against the CPU time it is given, and gives up with "Unable to
	// get accurate CPU usage" when a loaded machine gave it none in its sample (a CI run failed on that):
	// nothing to do with the image, so that one error is tried again.
	for attempt := 1; ; attempt++ {
		out, err := exec.Command(p, args...).CombinedOutput()
		if err == nil {
			return
		}
		if attempt < 5 && strings.Contains(string(out), "Unable to get accurate CPU usage") {
			continue
		}
		t.Fatalf("qemu-img %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// testImage builds a raw disk image of testImageSize bytes that exercises every kind of qcow2 cluster once
// converted: a GPT with a partition, random (incompressible) data, a compressible run, and zeros.
func testImage(t testing.TB, dir string) string {
	t.Helper()
	const size = testImageSize
	p := filepath.Join(dir, "image.raw")
	b := make([]byte, size)
	_, _ = rand.Read(b[1<<20 : 3<<20])
	copy(b[4<<20:], bytes.Repeat([]byte("yonder "), (1<<20)/7))
	_, _ = rand.Read(b[size-4096:])
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sfdisk := exec.Command("sfdisk", "--quiet", p)
	sfdisk.Stdin = strings.NewReader("label: gpt\nstart=2048, size=4096, type=linux\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v: %s", err, out)
	}
	return p
}

// fileServer serves dir over HTTP and counts requests per path.
func fileServer(t testing.TB, dir string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv
}
