package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// cloudImageName is the Debian cloud image's name in the boot server's artifacts directory.
const cloudImageName = "debian-cloud.qcow2"

// cloudInitMarker starts the line the user data's runcmd prints on the serial console.
const cloudInitMarker = "YONDER-CLOUD-INIT "

var cloudInitLine = regexp.MustCompile(regexp.QuoteMeta(cloudInitMarker) +
	`token=(\S*) hostname=(\S*) instance-id=(\S*) addresses=(\S*) datasource=(\S*)`)

// A real cloud image on bare metal, as a user brings one: a Debian bookworm with systemd and cloud-init
// (test/osimage, built from Debian's packages) is written by the provisioning ramdisk to the VM's 3 GiB
// disk named by serial, the config-2 drive goes after it, and the host boots its disk. cloud-init's
// ConfigDrive datasource runs the user data — write_files writes a token only the user data holds and
// runcmd prints it on the serial console with what the booted system says about itself: the hostname
// cloud-init set (the metaData Secret's, not the host's name), the instance-id (meta_data.json's uuid,
// the BareMetalHost's UID), the IPv4 address cloud-init configured from network_data.json (a static
// address no DHCP server hands out, checked again by pinging it from the lab bridge) and the datasource.
// Each phase's wall time is logged.
func TestQEMUHostBootsCloudImageAndRunsCloudInit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	imaged := time.Since(start)
	artifacts := func(t *testing.T, dir string, serverKey []byte) inventory.BootConfig {
		t.Helper()
		boot := artifactsGeneric(t, dir, serverKey)
		g.Expect(copyFile(img.QCOW2, filepath.Join(dir, cloudImageName))).To(Succeed())
		return boot
	}
	const serial = "cloud-disk-0"
	diskFile := filepath.Join(t.TempDir(), "vm0-disk.raw")
	// The disk is twice the image: the config drive goes at its end, after free space cloud-init could grow into.
	// 2 GiB of memory: the ramdisk spools the 726 MiB qcow2 in its tmpfs (half the memory) before converting it.
	l := newMetalLab(ctx, t, artifacts, 8*time.Minute, 2048, func(s *redfishsim.QEMUSystem) {
		s.Disk, s.DiskSerial, s.DiskSizeBytes = diskFile, serial, 2*img.RawSize
	})
	prepared := time.Since(start)
	registered := l.register(g)

	tok := make([]byte, 12)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	hostname := "ci-" + token[:8]
	staticIP := fmt.Sprintf("10.250.%d.150", l.n.Slot)
	userData := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-cloud-config"},
		Data: map[string][]byte{"userData": []byte(cloudConfig(token))}}
	meta := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-meta-data"},
		// cloud-init's ConfigDrive takes local-hostname from meta_data.json's "hostname": the Secret's wins over
		// the local-hostname the controller writes (the host's name).
		Data: map[string][]byte{"metaData": []byte("hostname: " + hostname + "\n")}}
	network := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-network-data"},
		Data: map[string][]byte{"networkData": []byte(networkData(l.host.Spec.BootMACAddress, staticIP, l.n.Gateway.String()))}}
	for _, s := range []*corev1.Secret{userData, meta, network} {
		g.Expect(env.Create(ctx, s)).To(Succeed())
	}

	start = time.Now()
	l.update(g, func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: "YonderMetalMachine", Namespace: l.ns, Name: "m0"}
		h.Spec.Image = &metal3v1.Image{URL: l.artifactsURL + cloudImageName, Checksum: img.QCOW2SHA256, ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}
		h.Spec.RootDeviceHints = &metal3v1.RootDeviceHints{SerialNumber: serial}
		h.Spec.UserData = &corev1.SecretReference{Name: userData.Name, Namespace: l.ns}
		h.Spec.MetaData = &corev1.SecretReference{Name: meta.Name, Namespace: l.ns}
		h.Spec.NetworkData = &corev1.SecretReference{Name: network.Name, Namespace: l.ns}
		h.Spec.AutomatedCleaningMode = metal3v1.CleaningModeDisabled
		h.Spec.Online = true
	})
	g.Eventually(func(g Gomega) string { return l.get(g).Annotations[baremetalhost.AttestationAnnotation] }, 5*time.Minute, time.Second).
		Should(ContainSubstring("BootstrapDataReleased"))
	attested := time.Since(start)
	// Generous bounds, not expectations: TCG writing and booting a 1.5 GiB image took 1 min 21 s → 2 min 22 s
	// on a quiet machine and 4 min 52 s → 10 min 45 s at load 15 (two more QEMU suites running beside it).
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, 12*time.Minute, time.Second).
		Should(Equal(metal3v1.StateProvisioned))
	written := time.Since(start)
	got := l.get(g)
	g.Expect(l.sim.State("vm0").Override).To(Equal("Hdd"), "the host boots its disk from now on")

	// QEMU truncates the console at each power-on: from here on it holds the disk boot only.
	var m []string
	g.Eventually(func(g Gomega) {
		console, err := os.ReadFile(l.driver.ConsoleLog("vm0"))
		g.Expect(err).NotTo(HaveOccurred())
		m = cloudInitLine.FindStringSubmatch(string(console))
		g.Expect(m).NotTo(BeNil(), "no cloud-init marker on the console yet")
	}, 12*time.Minute, time.Second).Should(Succeed())
	ran := time.Since(start)
	g.Expect(m[1]).To(Equal(token), "write_files wrote the user data's token and runcmd read it back")
	g.Expect(m[2]).To(Equal(hostname), "cloud-init set the metaData Secret's hostname, not the host's name %s", got.Name)
	g.Expect(m[3]).To(Equal(string(got.UID)), "the instance-id is meta_data.json's uuid, the BareMetalHost's UID")
	g.Expect(strings.Split(m[4], ",")).To(ContainElement(staticIP+"/24"), "cloud-init configured network_data.json's address")
	g.Expect(m[5]).To(HavePrefix("DataSourceConfigDrive"), "cloud-init read the config drive")
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(1), "one PXE boot, then the disk")
	out, err := exec.CommandContext(ctx, "ping", "-c", "1", "-W", "5", staticIP).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "the booted host answers on the address cloud-init gave it: %s", out)

	t.Logf("phases: image (cache) %s; boot artefacts %s; registered+inspected %s; claim → attested %s → %d MiB image (%d MiB qcow2) written, disk boot requested %s → cloud-init's runcmd on the console %s",
		imaged.Round(time.Millisecond), prepared.Round(time.Millisecond), registered.Round(time.Millisecond), attested.Round(time.Millisecond),
		img.RawSize>>20, img.QCOW2Size>>20, written.Round(time.Millisecond), ran.Round(time.Millisecond))
}

// cloudConfig is the user data: a file only it knows the content of, and a runcmd that prints that
// content with the system's own view of its hostname, instance-id, addresses and datasource.
func cloudConfig(token string) string {
	return `#cloud-config
write_files:
  - path: /etc/yonder-e2e/token
    permissions: "0600"
    content: ` + token + `
runcmd:
  - |
    echo "` + cloudInitMarker + `token=$(cat /etc/yonder-e2e/token) hostname=$(hostname) instance-id=$(cat /var/lib/cloud/data/instance-id) addresses=$(ip -4 -o addr show scope global | awk '{print $4}' | paste -sd, -) datasource=$(tr ' ' _ < /var/lib/cloud/instance/datasource)" > /dev/ttyS0
`
}

// networkData is OpenStack's network_data.json (as CAPM3 renders it) with one static IPv4 address on the
// boot NIC, found by its MAC.
func networkData(mac, ip, gateway string) string {
	return fmt.Sprintf(`{"links": [{"id": "boot0", "type": "phy", "ethernet_mac_address": %q, "mtu": 1500}],
"networks": [{"id": "lab", "type": "ipv4", "link": "boot0", "ip_address": %q, "netmask": "255.255.255.0",
  "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": %q}], "network_id": "lab"}],
"services": []}`, mac, ip, gateway)
}
