package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/bootdisk"
	"github.com/yonder-dev/yonder/test/imagewrite"
	"github.com/yonder-dev/yonder/test/metalboot"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// diskImageName is the node image's name in the boot server's artifacts directory: the image is served
// over HTTP like any image a user names (their own web server, or the boot server's directory).
const diskImageName = "node.qcow2"

// A disk image, the Metal3 way, on a real machine boot: the VM PXE-boots the ramdisk, attests, receives
// its instructions and writes the qcow2 image (converted, verified) to the virtio disk that
// rootDeviceHints name by serial, adds the config-2 drive and reports; the controller switches the host
// to boot its disk and power-cycles it; the image's own initramfs finds the config drive and prints the
// user data's digest and meta_data's hostname. Released with automatedCleaningMode metadata, the VM
// PXE-boots once more and its disk loses every partition table and signature (checked on the disk file).
// This image has the provider's key built in (the other tests boot the generic one, with the served key):
// the agent verifies with it and ignores the key the boot server serves beside the image. Each phase's
// wall time is logged, and the image write rate next to `qemu-img convert` and `dd` of the same image in
// the same run (test/imagewrite).
func TestQEMUHostWritesImageBootsDiskAndCleans(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	img, err := bootdisk.Cached(ctx, bootdisk.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	artifacts := func(t *testing.T, dir string, serverKey []byte) inventory.BootConfig {
		t.Helper()
		boot := artifactsAgent(t, dir, serverKey)
		g.Expect(copyFile(img.QCOW2, filepath.Join(dir, diskImageName))).To(Succeed())
		return boot
	}
	const serial = "node-disk-0"
	diskFile := filepath.Join(t.TempDir(), "vm0-disk.raw")
	l := newMetalLab(ctx, t, artifacts, 8*time.Minute, 2, 512, func(s *redfishsim.QEMUSystem) { s.Disk, s.DiskSerial = diskFile, serial })
	disk := l.driver.DiskPath("vm0")
	g.Expect(disk).NotTo(BeEmpty())
	prepared := time.Since(start)
	registered := l.register(g)

	meta := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-meta-data"},
		Data: map[string][]byte{"metaData": []byte("hostname: worker-vm0\n")}}
	g.Expect(env.Create(ctx, meta)).To(Succeed())
	start = time.Now()
	l.update(g, func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: "YonderMetalMachine", Namespace: l.ns, Name: "m0"}
		h.Spec.Image = &metal3v1.Image{URL: l.artifactsURL + diskImageName, Checksum: img.QCOW2SHA256, ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}
		h.Spec.RootDeviceHints = &metal3v1.RootDeviceHints{SerialNumber: serial}
		h.Spec.UserData = &corev1.SecretReference{Name: l.userData.Name, Namespace: l.ns}
		h.Spec.MetaData = &corev1.SecretReference{Name: meta.Name, Namespace: l.ns}
		h.Spec.AutomatedCleaningMode = metal3v1.CleaningModeMetadata
		h.Spec.Online = true
	})
	g.Eventually(func(g Gomega) string { return l.get(g).Annotations[baremetalhost.AttestationAnnotation] }, 5*time.Minute, time.Second).
		Should(ContainSubstring("BootstrapDataReleased"))
	attested := time.Since(start)
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, 5*time.Minute, time.Second).
		Should(Equal(metal3v1.StateProvisioned))
	written := time.Since(start)
	got := l.get(g)
	hostWrite, rep, err := imagewrite.HostRate(got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Device).To(Equal("/dev/vda"), "the disk the hints named")
	g.Expect(rep.Bytes).To(Equal(img.RawSize))
	g.Expect(l.sim.State("vm0").Override).To(Equal("Hdd"), "the host boots its disk from now on")
	g.Expect(got.Status.HardwareDetails.NIC).To(ContainElement(And(HaveField("MAC", got.Spec.BootMACAddress),
		HaveField("IP", got.Annotations[baremetalhost.BootAddressAnnotation]))), "the boot NIC's IP is its DHCP lease")

	// The disk boot: the image's initramfs reads the config drive the ramdisk wrote.
	sum := sha256.Sum256(l.userData.Data["userData"])
	var boot bootdisk.Boot
	g.Eventually(func(g Gomega) {
		console, err := os.ReadFile(l.driver.ConsoleLog("vm0"))
		g.Expect(err).NotTo(HaveOccurred())
		b, ok, err := bootdisk.Parse(console)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue(), "no disk boot marker yet")
		boot = b
	}, 3*time.Minute, time.Second).Should(Succeed())
	diskBooted := time.Since(start)
	g.Expect(boot.ConfigDrive).To(BeTrue())
	g.Expect(boot.UserDataSHA256).To(Equal(hex.EncodeToString(sum[:])), "the config drive holds exactly the user data")
	g.Expect(boot.UserDataBytes).To(Equal(int64(len(l.userData.Data["userData"]))))
	g.Expect(boot.Hostname).To(Equal("worker-vm0"), "meta_data.json carries the metaData Secret's keys")
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(1), "one PXE boot, then the disk")
	// The provisioning boot's console, kept when the disk boot started.
	console, err := os.ReadFile(l.driver.EarlierConsoleLog("vm0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(console)).To(ContainSubstring(metalboot.AttestedLine(l.userData.Data["userData"])))
	g.Expect(string(console)).NotTo(ContainSubstring(metalboot.ServedKeyMarker), "the key built into this image wins over the one the boot server serves")
	// What the ramdisk wrote is the image: every byte after the partition table's sector (the config drive
	// added its entry there) up to the image's end.
	want, err := rangeSHA256(img.Raw, 512, img.RawSize)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rangeSHA256(disk, 512, img.RawSize)).To(Equal(want))

	// The same image by qemu-img convert and dd, for the write rate's baselines.
	baselines, err := imagewrite.Measure(ctx, img.QCOW2, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(baselines.Convert.Bytes).To(Equal(img.RawSize))

	start = time.Now()
	l.update(g, func(h *metal3v1.BareMetalHost) {
		h.Spec.Image, h.Spec.UserData, h.Spec.MetaData, h.Spec.RootDeviceHints, h.Spec.Online, h.Spec.ConsumerRef = nil, nil, nil, nil, false, nil
	})
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, 8*time.Minute, time.Second).
		Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func() bool { return l.driver.Running("vm0") }, time.Minute, 200*time.Millisecond).Should(BeFalse(), "the VM was powered off")
	cleaned := time.Since(start)
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(2), "one cleaning boot")
	g.Expect(l.get(g).Status.Conditions).To(ContainElement(And(HaveField("Type", baremetalhost.BareMetalHostProvisionedCondition),
		HaveField("Message", ContainSubstring("disk metadata cleaned")))))
	head := make([]byte, 1<<20)
	f, err := os.Open(disk)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = io.ReadFull(f, head)
	_ = f.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Count(head, []byte{0})).To(Equal(len(head)), "the partition table and boot code are gone")
	out, err := exec.CommandContext(ctx, "blkid", "-p", disk).CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "blkid finds no signature: %s", out)
	t.Logf("phases: boot artefacts %s; registered+inspected %s; claim → attested %s → image written, disk boot requested %s → config drive read by the image %s; "+
		"release → cleaned, off, available %s",
		prepared.Round(time.Millisecond), registered.Round(time.Millisecond), attested.Round(time.Millisecond), written.Round(time.Millisecond),
		diskBooted.Round(time.Millisecond), cleaned.Round(time.Millisecond))
	t.Logf("the ramdisk's report: %s in %s", rep.Message, rep.Duration)
	t.Log(imagewrite.Line(hostWrite, baselines))
}

func rangeSHA256(path string, from, to int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, from, to-from)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		return fmt.Errorf("failed to copy %s: %w", from, err)
	}
	return nil
}
