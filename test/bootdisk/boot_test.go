package bootdisk_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/bootdisk"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// bootTimeout bounds one boot under TCG: SeaBIOS, syslinux loading 9 MB, the kernel and the initramfs took
// 7-10 s on an idle 2-core machine; the margin covers a machine busy with a full CI run.
const bootTimeout = 3 * time.Minute

// The real thing, as the bare-metal e2e will do it: the image is copied onto a 2 GiB disk file, a config
// drive (a FAT partition labelled config-2 in cloud-init's ConfigDrive layout) is appended after it, and
// a QEMU host behind the Redfish emulator is booted with the override "Hdd". SeaBIOS boots the disk and the
// image reports the user data's digest, meta_data.json's hostname and the disk's serial on the console. The
// same host told to PXE-boot tries its NIC first; FAT32 and ISO 9660 config drives are found as well; a host
// whose disk has no config drive says so.
func TestQEMUHostBootsTheImageFromDisk(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	img, err := bootdisk.Cached(ctx, bootdisk.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	tap := fmt.Sprintf("ybd%d", os.Getpid()%1000000)
	if out, err := exec.CommandContext(ctx, "ip", "tuntap", "add", "dev", tap, "mode", "tap").CombinedOutput(); err != nil {
		t.Fatalf("failed to create tap %s (the test runs as root): %v: %s", tap, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", tap).Run() })
	g.Expect(exec.CommandContext(ctx, "ip", "link", "set", tap, "up").Run()).To(Succeed())

	dir := t.TempDir()
	driver := redfishsim.NewQEMUDriver(filepath.Join(dir, "vms"))
	t.Cleanup(driver.Close)
	g.Expect(driver.Add(ctx, "vm0", redfishsim.QEMUSystem{Tap: tap, MAC: "52:54:00:b0:0d:01", Disk: filepath.Join(dir, "vm0.raw")})).To(Succeed())
	g.Expect(driver.Add(ctx, "vm1", redfishsim.QEMUSystem{Tap: tap, MAC: "52:54:00:b0:0d:02", Disk: filepath.Join(dir, "vm1.raw"), DiskSerial: "SER-VM1"})).To(Succeed())
	g.Expect(driver.Add(ctx, "vm2", redfishsim.QEMUSystem{Tap: tap, MAC: "52:54:00:b0:0d:03", Disk: filepath.Join(dir, "vm2.raw")})).To(Succeed())
	g.Expect(driver.Add(ctx, "vm3", redfishsim.QEMUSystem{Tap: tap, MAC: "52:54:00:b0:0d:04", Disk: filepath.Join(dir, "vm3.raw")})).To(Succeed())
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "pw", Driver: driver, Plain: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(sim.Close)
	sim.AddSystem(redfishsim.DefaultSystem("vm0", "52:54:00:b0:0d:01"))
	sim.AddSystem(redfishsim.DefaultSystem("vm1", "52:54:00:b0:0d:02"))
	sim.AddSystem(redfishsim.DefaultSystem("vm2", "52:54:00:b0:0d:03"))
	sim.AddSystem(redfishsim.DefaultSystem("vm3", "52:54:00:b0:0d:04"))
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range []string{"vm0", "vm1", "vm2", "vm3"} {
				for _, f := range []string{driver.ConsoleLog(id), driver.FirmwareLog(id)} {
					b, _ := os.ReadFile(f)
					if len(b) > 6000 {
						b = b[len(b)-6000:]
					}
					t.Logf("%s:\n%s", f, b)
				}
			}
		}
	})

	// The provisioning ramdisk's part, done here by hand: the image, then the config drive after it.
	userData := make([]byte, 3000)
	_, _ = rand.Read(userData)
	userData = append([]byte("#cloud-config\n# "+hex.EncodeToString(userData[:16])+"\n"), userData...)
	want := sha256.Sum256(userData)
	disk := driver.DiskPath("vm0")
	g.Expect(disk).To(Equal(filepath.Join(dir, "vm0.raw")))
	st, err := os.Stat(disk)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Size()).To(Equal(int64(redfishsim.DefaultDiskSizeBytes)), "the driver created the disk at its default size")
	writeImage(t, img.Raw, disk)
	appendConfigDrive(t, disk, img.RawSize, "vfat16", userData, `{"uuid": "3b0c2d4e", "hostname": "vm0.example", "name": "vm0"}`)
	// FAT32 keeps its label elsewhere in the boot sector; a small user_data, a pretty-printed meta_data.json.
	writeImage(t, img.Raw, driver.DiskPath("vm1"))
	appendConfigDrive(t, driver.DiskPath("vm1"), img.RawSize, "vfat32", []byte("#!/bin/sh\necho hi\n"), "{\n  \"uuid\": \"9f\",\n  \"hostname\": \"vm1\"\n}\n")
	writeImage(t, img.Raw, driver.DiskPath("vm2"))
	// ISO 9660, the format Ironic's config drives have.
	writeImage(t, img.Raw, driver.DiskPath("vm3"))
	appendConfigDrive(t, driver.DiskPath("vm3"), img.RawSize, "iso9660", userData, `{"hostname": "vm3", "uuid": "7"}`)

	// PXE first: the firmware runs the NIC's iPXE ROM before it would try the disk.
	redfish(t, sim, http.MethodPatch, "vm0", `{"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Pxe"}}`)
	redfish(t, sim, http.MethodPost, "vm0/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	g.Eventually(func() string { b, _ := os.ReadFile(driver.FirmwareLog("vm0")); return string(b) }, bootTimeout, 200*time.Millisecond).
		Should(ContainSubstring("Booting from ROM"), "SeaBIOS boots the iPXE option ROM")
	fw, err := os.ReadFile(driver.FirmwareLog("vm0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(fw)).NotTo(ContainSubstring("Booting from Hard Disk"), "the NIC comes first")
	redfish(t, sim, http.MethodPost, "vm0/Actions/ComputerSystem.Reset", `{"ResetType": "ForceOff"}`)

	// The disk, as the controller asks for it once the image is written.
	redfish(t, sim, http.MethodPatch, "vm0", `{"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Hdd"}}`)
	start := time.Now()
	redfish(t, sim, http.MethodPost, "vm0/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	b := waitForBoot(t, driver.ConsoleLog("vm0"))
	t.Logf("vm0 booted its disk to the marker in %v", time.Since(start).Round(100*time.Millisecond))
	g.Expect(b).To(Equal(bootdisk.Boot{ConfigDrive: true, UserDataSHA256: hex.EncodeToString(want[:]), UserDataBytes: int64(len(userData)), Hostname: "vm0.example"}))
	console, err := os.ReadFile(driver.ConsoleLog("vm0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bootdisk.ParseDisks(console)).To(Equal([]bootdisk.Disk{{Name: "vda", Serial: "D-vm0", Sectors: redfishsim.DefaultDiskSizeBytes / 512}}))
	fw, err = os.ReadFile(driver.FirmwareLog("vm0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(fw)).To(ContainSubstring("Booting from Hard Disk"))
	g.Expect(string(fw)).NotTo(ContainSubstring("Booting from ROM"), "no network boot on the way to the disk")
	redfish(t, sim, http.MethodPost, "vm0/Actions/ComputerSystem.Reset", `{"ResetType": "ForceOff"}`)

	// No override at all: the normal boot order is the disk too. vm1's config drive is FAT32, vm2 has none.
	start = time.Now()
	redfish(t, sim, http.MethodPost, "vm1/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	b = waitForBoot(t, driver.ConsoleLog("vm1"))
	t.Logf("vm1 booted its disk to the marker in %v", time.Since(start).Round(100*time.Millisecond))
	small := sha256.Sum256([]byte("#!/bin/sh\necho hi\n"))
	g.Expect(b).To(Equal(bootdisk.Boot{ConfigDrive: true, UserDataSHA256: hex.EncodeToString(small[:]), UserDataBytes: 18, Hostname: "vm1"}))
	console, err = os.ReadFile(driver.ConsoleLog("vm1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bootdisk.ParseDisks(console)).To(Equal([]bootdisk.Disk{{Name: "vda", Serial: "SER-VM1", Sectors: redfishsim.DefaultDiskSizeBytes / 512}}))
	redfish(t, sim, http.MethodPost, "vm1/Actions/ComputerSystem.Reset", `{"ResetType": "ForceOff"}`)

	start = time.Now()
	redfish(t, sim, http.MethodPost, "vm2/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	b = waitForBoot(t, driver.ConsoleLog("vm2"))
	t.Logf("vm2 booted its disk to the marker in %v", time.Since(start).Round(100*time.Millisecond))
	g.Expect(b.ConfigDrive).To(BeFalse())
	console, err = os.ReadFile(driver.ConsoleLog("vm2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(console)).To(ContainSubstring(bootdisk.NoConfigDrive))
	redfish(t, sim, http.MethodPost, "vm2/Actions/ComputerSystem.Reset", `{"ResetType": "ForceOff"}`)

	redfish(t, sim, http.MethodPatch, "vm3", `{"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Hdd"}}`)
	start = time.Now()
	redfish(t, sim, http.MethodPost, "vm3/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	b = waitForBoot(t, driver.ConsoleLog("vm3"))
	t.Logf("vm3 booted its disk to the marker in %v", time.Since(start).Round(100*time.Millisecond))
	g.Expect(b).To(Equal(bootdisk.Boot{ConfigDrive: true, UserDataSHA256: hex.EncodeToString(want[:]), UserDataBytes: int64(len(userData)), Hostname: "vm3"}))
}

func waitForBoot(t *testing.T, consoleLog string) bootdisk.Boot {
	t.Helper()
	var b bootdisk.Boot
	NewWithT(t).Eventually(func(g Gomega) {
		console, _ := os.ReadFile(consoleLog)
		var ok bool
		var err error
		b, ok, err = bootdisk.Parse(console)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue(), "no disk boot marker on the console yet")
	}, bootTimeout, 250*time.Millisecond).Should(Succeed())
	return b
}

// writeImage copies an image onto the start of a disk file without truncating it, as dd conv=notrunc does.
func writeImage(t *testing.T, image, disk string) {
	t.Helper()
	src, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	dst, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// appendConfigDrive adds a 64 MiB partition after the image (MiB-aligned) and fills it with a filesystem
// labelled config-2 (kind: "vfat16", "vfat32" or "iso9660") holding
// openstack/latest/{user_data,meta_data.json,network_data.json}: sfdisk for the partition, mkfs.vfat and
// mtools or genisoimage for a separate file, then that file copied into place.
func appendConfigDrive(t *testing.T, disk string, after int64, kind string, userData []byte, metaData string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	const size = 64 << 20
	offset := (after + (1<<20 - 1)) &^ (1<<20 - 1)
	sf := exec.CommandContext(ctx, "sfdisk", "--append", "--quiet", "--no-reread", "--no-tell-kernel", disk)
	typ := map[string]string{"vfat16": "e", "vfat32": "c", "iso9660": "83"}[kind]
	g.Expect(typ).NotTo(BeEmpty(), "config drive kind %s", kind)
	sf.Stdin = strings.NewReader(fmt.Sprintf("start=%d, size=%d, type=%s\n", offset/512, size/512, typ))
	out, err := sf.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	dir := t.TempDir()
	tree := filepath.Join(dir, "tree", "openstack", "latest")
	g.Expect(os.MkdirAll(tree, 0o755)).To(Succeed())
	files := map[string][]byte{"user_data": userData, "meta_data.json": []byte(metaData),
		"network_data.json": []byte(`{"links": [], "networks": [], "services": []}`)}
	for name, b := range files {
		writeFile(t, tree, name, b)
	}
	fs := filepath.Join(dir, "config.fs")
	var cmds [][]string
	switch kind {
	case "iso9660":
		cmds = [][]string{{"genisoimage", "-quiet", "-o", fs, "-V", "config-2", "-J", "-r", filepath.Join(dir, "tree")}}
	default:
		mkfs := []string{"mkfs.vfat", "-C", "-F", strings.TrimPrefix(kind, "vfat"), "-n", "config-2"}
		if kind == "vfat32" {
			mkfs = append(mkfs, "-s", "1") // one sector per cluster: 64 MiB then has the clusters FAT32 needs
		}
		cmds = [][]string{append(mkfs, fs, fmt.Sprint(size/1024)), {"mmd", "-i", fs, "::/openstack", "::/openstack/latest"}}
		for name := range files {
			cmds = append(cmds, []string{"mcopy", "-i", fs, filepath.Join(tree, name), "::/openstack/latest/" + name})
		}
	}
	for _, c := range cmds {
		cmd := exec.CommandContext(ctx, c[0], c[1:]...)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%v: %s", c, out)
	}
	src, err := os.Open(fs)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = src.Close() }()
	st, err := src.Stat()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Size()).To(BeNumerically("<=", size), "the filesystem fits its partition")
	dst, err := os.OpenFile(disk, os.O_WRONLY, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = io.Copy(io.NewOffsetWriter(dst, offset), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dst.Close()).To(Succeed())
}

// redfish sends one request to the emulator and expects 204 No Content.
func redfish(t *testing.T, sim *redfishsim.Server, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+sim.Host()+"/redfish/v1/Systems/"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "pw")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
}
