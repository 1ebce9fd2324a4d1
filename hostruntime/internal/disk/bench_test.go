package disk

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// BenchmarkImageWrite measures the verified image write next to the tools an operator would use by hand,
// on the same image and the same loop device: a raw image downloaded by Writer (checksum computed while
// writing) against `curl | dd conv=fsync` (no checksum) and `curl | tee disk | sha256sum; sync` (the same
// work by hand), and a compressed qcow2 downloaded, verified and
// converted by Writer against `qemu-img convert -n` of the local file (no download, no checksum). The
// x-baseline metrics are Writer's time over the peer's.
func BenchmarkImageWrite(b *testing.B) {
	size := benchsize.Pick(int64(256<<20), int64(4<<20))
	dir := b.TempDir()
	raw := filepath.Join(dir, "image.raw")
	data := make([]byte, size)
	_, _ = rand.Read(data[:size/2]) // half incompressible data, half zeros: a typical OS image's mix
	if err := os.WriteFile(raw, data, 0o600); err != nil {
		b.Fatal(err)
	}
	qcow := filepath.Join(dir, "image.qcow2")
	qemuImg(b, "convert", "-c", "-f", "raw", "-O", "qcow2", raw, qcow)
	qdata, err := os.ReadFile(qcow)
	if err != nil {
		b.Fatal(err)
	}
	srv := fileServer(b, dir)
	dev := loopDevice(b, size+(8<<20))
	// Allocate the loop device's backing file first: whichever writer ran first on a sparse file would
	// otherwise pay for the allocation alone.
	fillRandom(b, dev)
	w := &Writer{Client: srv.Client(), SpoolDir: b.TempDir()}
	ctx := context.Background()

	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	shell := func(script string, args ...string) func() error {
		return func() error {
			out, err := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...).CombinedOutput()
			if err != nil {
				b.Logf("%s", out)
			}
			return err
		}
	}
	var rawOurs, rawDD, rawTee, qOurs, qQemu time.Duration
	b.ResetTimer()
	for b.Loop() {
		rawDD += timed(shell(`curl -sSf "$1" | dd of="$2" bs=4M iflag=fullblock conv=fsync status=none`, srv.URL+"/image.raw", dev))
		rawTee += timed(shell(`curl -sSf "$1" | tee "$2" | sha256sum >/dev/null && sync`, srv.URL+"/image.raw", dev))
		rawOurs += timed(func() error {
			_, err := w.Write(ctx, dev, metal3v1.Image{URL: srv.URL + "/image.raw", Checksum: imagechecksum.Digest("sha256", data)})
			return err
		})
		qQemu += timed(shell(`qemu-img convert -n -f qcow2 -O raw "$1" "$2" && sync`, qcow, dev))
		qOurs += timed(func() error {
			_, err := w.Write(ctx, dev, metal3v1.Image{URL: srv.URL + "/image.qcow2", Checksum: imagechecksum.Digest("sha256", qdata), DiskFormat: format(FormatQcow2)})
			return err
		})
	}
	n := float64(b.N)
	mbps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / (d.Seconds() / n) }
	b.ReportMetric(mbps(rawOurs), "raw-MiB/s")
	b.ReportMetric(mbps(rawDD), "baseline-dd-MiB/s")
	b.ReportMetric(mbps(rawTee), "baseline-tee-sha256sum-MiB/s")
	b.ReportMetric(rawOurs.Seconds()/rawDD.Seconds(), "raw-x-baseline")
	b.ReportMetric(rawOurs.Seconds()/rawTee.Seconds(), "raw-x-verified-baseline")
	b.ReportMetric(mbps(qOurs), "qcow2-MiB/s")
	b.ReportMetric(mbps(qQemu), "baseline-qemu-img-MiB/s")
	b.ReportMetric(qOurs.Seconds()/qQemu.Seconds(), "qcow2-x-baseline")
}
