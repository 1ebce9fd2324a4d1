package imagewrite_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/imagewrite"
)

// The baselines run the real qemu-img and dd on a small qcow2 (random data, then a hole): both write the
// image's full raw size and leave no file behind.
func TestMeasureWritesTheImageTwiceAndCleansUp(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src.raw")
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	g.Expect(os.WriteFile(src, data, 0o600)).To(Succeed())
	g.Expect(os.Truncate(src, 8<<20)).To(Succeed())
	img := filepath.Join(t.TempDir(), "img.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", src, img).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	dir := t.TempDir()
	b, err := imagewrite.Measure(ctx, img, dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Convert.Bytes).To(BeEquivalentTo(8 << 20))
	g.Expect(b.DD.Bytes).To(BeEquivalentTo(8 << 20))
	g.Expect(b.Convert.Duration).To(BeNumerically(">", 0))
	g.Expect(b.DD.Duration).To(BeNumerically(">", 0))
	g.Expect(os.ReadDir(dir)).To(BeEmpty(), "the converted and copied files are removed")

	_, err = imagewrite.Measure(ctx, filepath.Join(dir, "missing.qcow2"), dir)
	g.Expect(err).To(MatchError(ContainSubstring("failed to run qemu-img")))
	g.Expect(os.ReadDir(dir)).To(BeEmpty())
}

// The host's rate comes from a successful image write's report only, and the line shows the three rates.
func TestHostRateReadsTheReport(t *testing.T) {
	host := func(rep *baremetalhost.ReportRecord) *metal3v1.BareMetalHost {
		h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "h0"}}
		if rep != nil {
			raw, _ := json.Marshal(rep)
			h.Annotations = map[string]string{baremetalhost.ReportAnnotation: string(raw)}
		}
		return h
	}
	written := baremetalhost.ReportRecord{Action: wire.ActionWriteImage, Success: true, Device: "/dev/vda", Bytes: 1536 << 20, Duration: "1m4s"}
	for _, tc := range []struct {
		name string
		rep  *baremetalhost.ReportRecord
		want string
	}{
		{"no report", nil, "no ramdisk report"},
		{"failed", &baremetalhost.ReportRecord{Action: wire.ActionWriteImage, Message: "checksum mismatch"}, "not a written image"},
		{"no duration", &baremetalhost.ReportRecord{Action: wire.ActionWriteImage, Success: true, Bytes: 1}, "failed to read the duration"},
		{"no bytes", &baremetalhost.ReportRecord{Action: wire.ActionWriteImage, Success: true, Duration: "1s"}, "nothing measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, _, err := imagewrite.HostRate(host(tc.rep))
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	g := NewWithT(t)
	r, rep, err := imagewrite.HostRate(host(&written))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Device).To(Equal("/dev/vda"))
	g.Expect(r).To(Equal(imagewrite.Rate{Bytes: 1536 << 20, Duration: 64 * time.Second}))
	g.Expect(r.MiBPerSecond()).To(BeNumerically("==", 24))
	g.Expect(imagewrite.Line(r, imagewrite.Baselines{Convert: imagewrite.Rate{Bytes: 1536 << 20, Duration: 4 * time.Second},
		DD: imagewrite.Rate{Bytes: 1536 << 20, Duration: 8 * time.Second}})).
		To(Equal("image write: host 24.0 MiB/s (1536 MiB in 1m4s), qemu-img convert 384.0 MiB/s, dd 192.0 MiB/s — same image, same run"))
}
