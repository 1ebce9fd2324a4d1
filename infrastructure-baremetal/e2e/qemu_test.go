// Package e2e runs bare-metal hosts end to end on this machine: a BareMetalHost whose BMC is the Redfish
// emulator, whose power actions start and stop a QEMU VM (software emulation) with a software TPM and a
// tap NIC on a lab bridge, served by Yonder's real DHCP/TFTP/HTTP boot services.
package e2e_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/liveiso"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/managercache"
	"github.com/yonder-dev/yonder/test/bootdisk"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/metalboot"
	"github.com/yonder-dev/yonder/test/promread"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	// The whole management cluster: CAPI's controllers and webhooks, the provider's CRDs (its own and
	// Metal3's BareMetalHost) and webhooks; the reconcilers run in managers each test starts.
	code := envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:    []string{"infrastructure-baremetal/config/crd/bases", "infrastructure-baremetal/config/crd/metal3"},
		WebhookManifestPaths: []string{"infrastructure-baremetal/config/webhook/manifests.yaml"},
		AddToScheme:          []func(*runtime.Scheme) error{infrav1.AddToScheme, metal3v1.AddToScheme},
		Setup:                func(_ context.Context, e *envtest.Environment) error { return setup.SetupWebhooks(e.Manager) },
	}, func(e *envtest.Environment) { env = e })
	os.Exit(code)
}

// metalLab is one bare-metal site on a lab bridge: boot services (DHCP, TFTP, HTTP, attestation on the
// BareMetalHosts), a Redfish emulator whose power actions run a QEMU VM with a software TPM on a tap of
// the bridge, the host controller in its own manager, and one BareMetalHost "vm0" for that VM.
type metalLab struct {
	ns       string
	n        *labnet.Network
	reg      *prometheus.Registry
	driver   *redfishsim.QEMUDriver
	sim      *redfishsim.Server
	host     *metal3v1.BareMetalHost
	userData *corev1.Secret
	// artifactsURL is where the boot server serves its artifacts directory (ending in /).
	artifactsURL string
}

// labs numbers the metal labs of this test process (their VMs' MACs).
var labs atomic.Uint32

// newMetalLab starts the site; artifacts fills the boot artifacts directory and returns the boot config.
// A provisioning attempt times out after timeout; attempts bounds the PXE boots of one provisioning. Each
// vm option changes the VM's QEMU system before it is added (a disk, for instance).
func newMetalLab(ctx context.Context, t *testing.T, artifacts func(t *testing.T, dir string, serverKey []byte) inventory.BootConfig, timeout time.Duration, attempts, memMiB int, vm ...func(*redfishsim.QEMUSystem)) *metalLab {
	t.Helper()
	g := NewWithT(t)
	for _, need := range []string{"qemu-system-x86_64", "swtpm", "swtpm_setup", "/usr/lib/ipxe/virtio-net.rom"} {
		if _, err := exec.LookPath(need); err != nil {
			if _, serr := os.Stat(need); serr != nil {
				t.Fatalf("%s is missing: run `hack/test-bins.sh --packages` (installs qemu-system-x86, swtpm, ipxe)", need)
			}
		}
	}
	l := &metalLab{ns: env.CreateNamespace(ctx, t, "metal-e2e").Name, n: labnet.NewForTest(t), reg: prometheus.NewRegistry()}
	n := l.n
	tap := fmt.Sprintf("ybh%dt0", n.Slot)
	if labnet.LinkExists(tap) {
		_ = exec.Command("ip", "link", "del", tap).Run()
	}
	for _, args := range [][]string{{"tuntap", "add", "dev", tap, "mode", "tap"}, {"link", "set", tap, "master", n.Bridge}, {"link", "set", tap, "up"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
	}
	n.OnClose(func() error { _ = exec.Command("ip", "link", "del", tap).Run(); return nil })
	// A MAC of its own per lab: the hosts of earlier tests stay in the API server (envtest deletes no
	// namespaces) and boot MACs are unique across every managed host.
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x6d, byte(n.Slot), byte(labs.Add(1))}

	dir := t.TempDir()
	// The provider's signing key: the manager signs released data, the boot image carries the public half.
	signingKey, serverKey, err := metalboot.GenerateSigningKey(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	signer, err := attest.LoadSigningKey(signingKey)
	g.Expect(err).NotTo(HaveOccurred())
	boot := artifacts(t, dir, serverKey)
	inv := inventory.NewStatic()
	// The boot server's cache of verified live ISOs, as the manager makes it (--live-iso-cache-dir).
	isos, err := liveiso.New(t.TempDir(), nil, testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = isos.Close() })
	// The VM's swtpm has an EK certificate from swtpm-localca: the EK chain is verified against it.
	root, intermediate, err := swtpm.LocalCA(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	roots, err := attest.LoadCertPool(root)
	g.Expect(err).NotTo(HaveOccurred())
	intermediates, err := attest.LoadCertPool(intermediate)
	g.Expect(err).NotTo(HaveOccurred())
	svcs, err := netboot.Start(ctx, netboot.Config{Interface: n.Bridge, ServerIP: n.Gateway, HTTPPort: 8080, TFTPPort: 69,
		ArtifactsDir: dir, DHCP: dhcp.Config{Router: n.Gateway}, Attestation: attest.Config{EKRoots: roots, EKIntermediates: intermediates, SigningKey: signer},
		LiveISOs: isos.Handler()},
		inv, baremetalhost.AttestStore{Client: env.Client}, l.reg,
		testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = svcs.Stop() })

	l.driver = redfishsim.NewQEMUDriver(t.TempDir())
	t.Cleanup(l.driver.Close)
	sys := redfishsim.QEMUSystem{Tap: tap, MAC: mac.String(), MemoryMiB: memMiB}
	for _, o := range vm {
		o(&sys)
	}
	g.Expect(l.driver.Add(ctx, "vm0", sys)).To(Succeed())
	l.sim, err = redfishsim.Start(redfishsim.Options{Username: "admin", Password: "pw", Driver: l.driver})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(l.sim.Close)
	l.sim.AddSystem(redfishsim.DefaultSystem("vm0", mac.String()))
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{l.driver.ConsoleLog("vm0"), l.driver.FirmwareLog("vm0")} {
				b, _ := os.ReadFile(f)
				if len(b) > 20000 {
					b = b[len(b)-20000:]
				}
				t.Logf("%s:\n%s", f, b)
			}
		}
	})

	mgr, err := ctrl.NewManager(env.Config, manager.Options{Scheme: env.GetScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Client: managercache.ClientOptions()})
	g.Expect(err).NotTo(HaveOccurred())
	skip := true
	l.artifactsURL = fmt.Sprintf("http://%s:8080/artifacts/", n.Gateway)
	r := &baremetalhost.Reconciler{Client: mgr.GetClient(), NetBoot: inv, LiveISOs: isos, Namespaces: []string{l.ns}, Boot: boot,
		ProvisionTimeout: timeout, MaxProvisionAttempts: attempts, RetryInterval: 2 * time.Second, PowerPollInterval: 5 * time.Second}
	g.Expect(r.SetupWithManager(ctx, mgr, controller.Options{SkipNameValidation: &skip})).To(Succeed())
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("manager stopped with: %v", err)
		}
	})

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-bmc"}, Data: map[string][]byte{"username": []byte("admin"), "password": []byte("pw")}}
	g.Expect(env.Create(ctx, sec)).To(Succeed())
	l.userData = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0-user-data"},
		Data: map[string][]byte{"userData": []byte("#cloud-config\n# bootstrap data for vm0\n")}}
	g.Expect(env.Create(ctx, l.userData)).To(Succeed())
	l.host = &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "vm0", Labels: map[string]string{baremetalhost.ManagedLabel: "true"},
		// A new machine: the operator opens its enrolment window (kubectl yonder host enrol vm0 --for 1h).
		Annotations: map[string]string{baremetalhost.BootAddressAnnotation: fmt.Sprintf("10.250.%d.100", n.Slot),
			baremetalhost.EnrolmentWindowAnnotation: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}},
		Spec: metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: l.sim.Address("vm0"), CredentialsName: sec.Name}, BootMACAddress: mac.String()}}
	return l
}

func (l *metalLab) get(g Gomega) *metal3v1.BareMetalHost {
	out := &metal3v1.BareMetalHost{}
	g.Expect(env.Get(context.Background(), client.ObjectKeyFromObject(l.host), out)).To(Succeed())
	return out
}

func (l *metalLab) update(g Gomega, mutate func(*metal3v1.BareMetalHost)) {
	g.Eventually(func() error {
		cur := &metal3v1.BareMetalHost{}
		if err := env.Get(context.Background(), client.ObjectKeyFromObject(l.host), cur); err != nil {
			return err
		}
		mutate(cur)
		return env.Update(context.Background(), cur)
	}).Should(Succeed())
}

// claim is what CAPM3 / YonderMetalMachine write on a host they take: img, the user data unless nil, online.
func (l *metalLab) claim(g Gomega, img metal3v1.Image, userData *corev1.Secret) {
	l.update(g, func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: "YonderMetalMachine", Namespace: l.ns, Name: "m0"}
		h.Spec.Image = img.DeepCopy()
		if userData != nil {
			h.Spec.UserData = &corev1.SecretReference{Name: userData.Name, Namespace: l.ns}
		}
		h.Spec.Online = true
	})
}

func (l *metalLab) register(g Gomega) time.Duration {
	start := time.Now()
	g.Expect(env.Create(context.Background(), l.host)).To(Succeed())
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, time.Minute, 100*time.Millisecond).
		Should(Equal(metal3v1.StateAvailable))
	return time.Since(start)
}

func artifactsPlaceholder(t *testing.T, dir string, _ []byte) inventory.BootConfig {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("not a kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	return inventory.BootConfig{Kernel: "vmlinuz", Cmdline: "console=ttyS0"}
}

// A BareMetalHost on the emulator with a QEMU VM behind it: registered, inspected and available over
// Redfish; claimed, it gets the one-time PXE override and is powered on — the VM's firmware leases an
// address from our DHCP server, iPXE fetches the host's script (with its one-time ticket) and the kernel
// it names over HTTP. The kernel here is a placeholder, so the host never attests: the attempt times out
// and the host ends powered off (the VM killed) with the PXEBootTimeout error. One attempt is allowed: the
// retry with another PXE boot is the same controller path, tested against the emulator in
// reconcilers/baremetalhost (TestPXEBootTimeout: every attempt times out and is retried, then the error),
// and a second 45 s wait here
// cost CI time for nothing more. Wall time of each phase is logged.
func TestQEMUHostNeverAttests(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	l := newMetalLab(ctx, t, artifactsPlaceholder, 45*time.Second, 1, 256)
	registered := l.register(g)

	start := time.Now()
	// A disk image that is never written: the placeholder kernel never attests.
	l.claim(g, metal3v1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}, l.userData)
	g.Eventually(func() bool { return l.driver.Running("vm0") }, time.Minute, 100*time.Millisecond).Should(BeTrue(), "the BMC powered the VM on")
	poweredOn := time.Since(start)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_dhcp_requests_total", map[string]string{"outcome": "ack"})
	}, 3*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "the VM's firmware leased its reserved address")
	leased := time.Since(start)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "ipxe", "code": "200"})
	}, 2*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE fetched the host's script")
	scripted := time.Since(start)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "artifacts", "code": "200"})
	}, 2*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE fetched the kernel the script names")
	kernel := time.Since(start)
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(1))

	// No attestation follows: the attempt times out, then the VM is off and the host in error.
	g.Eventually(func(g Gomega) string { return l.get(g).Status.ErrorMessage }, 5*time.Minute, time.Second).
		Should(ContainSubstring("PXE boot 1 of 1"))
	g.Eventually(func() bool { return l.driver.Running("vm0") }, time.Minute, 200*time.Millisecond).Should(BeFalse(), "the VM was powered off")
	failed := time.Since(start)
	got := l.get(g)
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.ProvisioningError))
	g.Expect(got.Status.PoweredOn).To(BeFalse())
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(1))
	t.Logf("phases: registered+inspected %s; claim → VM on %s, DHCP ack %s, iPXE script %s, kernel fetched %s; the timed-out attempt → off %s",
		registered.Round(time.Millisecond), poweredOn.Round(time.Millisecond), leased.Round(time.Millisecond),
		scripted.Round(time.Millisecond), kernel.Round(time.Millisecond), failed.Round(time.Millisecond))
}

// artifactsAgent builds the provisioning boot the e2e stack and the lab use too (test/metalboot): Debian's
// kernel (hack/test-bins.sh --metal-kernel) and an initramfs of busybox-static, the virtio modules and the
// static yonder-agent built from this tree, which attests with the VM's TPM and then runs live (idles) or
// carries out its instructions. The provider's public key is built in.
func artifactsAgent(t *testing.T, dir string, serverKey []byte) inventory.BootConfig {
	t.Helper()
	if err := metalboot.Build(context.Background(), dir, metalboot.Options{ServerKey: serverKey}); err != nil {
		t.Fatalf("failed to build the provisioning boot: %v", err)
	}
	return inventory.BootConfig{Kernel: metalboot.Kernel, Initrd: metalboot.Initrd, Cmdline: "console=ttyS0 panic=-1"}
}

// artifactsGeneric builds the generic provisioning boot a release ships (`make boot-image` without
// BOOT_SERVER_KEY): no key built in, so the agent verifies with the key the boot server serves as a
// second initrd, as on a user's site that downloaded the release's image.
func artifactsGeneric(t *testing.T, dir string, _ []byte) inventory.BootConfig {
	t.Helper()
	if err := metalboot.Build(context.Background(), dir); err != nil {
		t.Fatalf("failed to build the provisioning boot: %v", err)
	}
	return inventory.BootConfig{Kernel: metalboot.Kernel, Initrd: metalboot.Initrd, Cmdline: "console=ttyS0 panic=-1"}
}

// A live ISO the Metal3 way (format live-iso), with a real machine boot: the boot server downloads the ISO
// (test/bootdisk's: ISOLINUX, Debian's kernel, an initramfs that says it booted live) from the URL the
// host names and verifies it against its checksum before the host is powered on; the VM PXE-boots Yonder's
// generic release ramdisk (the boot server's key as a second initrd), enrols and attests its TPM, and
// receives the live instructions without user data (Metal3 gives a live ISO none, and none is named
// here); the controller sets a persistent PXE boot and power-cycles it, and the VM's iPXE SAN-boots the ISO
// from the boot server with HTTP range requests; ISOLINUX boots it. A reboot annotation boots the ISO
// again, without another attestation. Released, the VM is powered off without a cleaning boot and the
// boot server drops the ISO. Wall time of each phase is logged.
func TestQEMUHostAttestsThenBootsItsLiveISO(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	img, err := bootdisk.Cached(ctx, bootdisk.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	artifacts := func(t *testing.T, dir string, serverKey []byte) inventory.BootConfig {
		t.Helper()
		boot := artifactsGeneric(t, dir, serverKey)
		g.Expect(copyFile(img.ISO, filepath.Join(dir, liveISOName))).To(Succeed())
		return boot
	}
	l := newMetalLab(ctx, t, artifacts, 8*time.Minute, 2, 512)
	prepared := time.Since(start)
	registered := l.register(g)

	start = time.Now()
	l.claim(g, metal3v1.Image{URL: l.artifactsURL + liveISOName, Checksum: img.ISOSHA256, ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("live-iso")}, nil)
	g.Eventually(func() float64 {
		return promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "ipxe", "code": "200"})
	}, 3*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 1), "iPXE fetched the host's script")
	scripted := time.Since(start)
	g.Expect(promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "artifacts", "code": "200"})).
		To(BeNumerically(">=", 1), "the ISO was downloaded from its URL before the host was powered on")
	g.Eventually(func(g Gomega) string { return l.get(g).Annotations[baremetalhost.AttestationAnnotation] }, 5*time.Minute, time.Second).
		Should(ContainSubstring("BootstrapDataReleased"))
	attested := time.Since(start)
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, 2*time.Minute, time.Second).
		Should(Equal(metal3v1.StateProvisioned))
	provisioned := time.Since(start)
	got := l.get(g)
	g.Expect(got.Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation), "the VM's TPM was pinned")
	g.Expect(got.Status.PoweredOn).To(BeTrue())
	g.Expect(got.Status.Provisioning.Image.DiskFormat).To(HaveValue(Equal("live-iso")))
	g.Expect(l.sim.State("vm0").Override).To(Equal("Pxe"), "every boot from now on is a network boot")
	liveBoots := func() int {
		b, _ := os.ReadFile(l.driver.ConsoleLog("vm0"))
		return strings.Count(string(b), bootdisk.LiveISOMarker)
	}
	g.Eventually(liveBoots, 3*time.Minute, time.Second).Should(Equal(1), "the VM booted the ISO")
	isoBooted := time.Since(start)
	g.Expect(promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "live", "code": "206"})).
		To(BeNumerically(">=", 1), "iPXE read the ISO from the boot server with range requests")
	// The generic ramdisk booted with the served key. (What it printed after the release may be cut short:
	// the controller power-cycles the host into its ISO as soon as the release is recorded.)
	g.Expect(promread.Sum(l.reg, "yonder_metal_http_requests_total", map[string]string{"handler": "serverkey", "code": "200"})).To(BeNumerically(">=", 1))
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(2), "the attestation's one-time PXE boot, then the ISO's persistent one")

	// Every boot boots the ISO: a reboot (Metal3's annotation) comes back to it without attesting again.
	start = time.Now()
	l.update(g, func(h *metal3v1.BareMetalHost) {
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[metal3v1.RebootAnnotationPrefix] = `{"mode":"hard"}` // the ISO's init does not shut down on ACPI
	})
	g.Eventually(func() int {
		b, _ := os.ReadFile(l.driver.EarlierConsoleLog("vm0"))
		return strings.Count(string(b), bootdisk.LiveISOMarker)
	}, 3*time.Minute, time.Second).Should(Equal(1), "the reboot started a new boot (the ISO boot before it is kept)")
	g.Eventually(liveBoots, 3*time.Minute, time.Second).Should(Equal(1), "the ISO booted again")
	rebooted := time.Since(start)
	g.Expect(l.get(g).Annotations).NotTo(HaveKey(metal3v1.RebootAnnotationPrefix), "the reboot was carried out")
	g.Expect(l.get(g).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))

	start = time.Now()
	l.update(g, func(h *metal3v1.BareMetalHost) {
		h.Spec.Image, h.Spec.Online, h.Spec.ConsumerRef = nil, false, nil
	})
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return l.get(g).Status.Provisioning.State }, 2*time.Minute, 200*time.Millisecond).
		Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func() bool { return l.driver.Running("vm0") }, time.Minute, 200*time.Millisecond).Should(BeFalse(), "the VM was powered off")
	released := time.Since(start)
	got = l.get(g)
	g.Expect(got.Status.PoweredOn).To(BeFalse())
	g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", baremetalhost.BareMetalHostProvisionedCondition),
		HaveField("Message", ContainSubstring("the host ran its live ISO")))))
	g.Expect(l.sim.State("vm0").PXEBoots).To(Equal(3), "the ISO's two boots after the attestation's, and no cleaning boot")
	t.Logf("phases: boot artefacts (static agent build + initramfs) %s; registered+inspected %s; claim → ISO verified, iPXE script %s → attested %s → "+
		"provisioned (persistent PXE, cycled) %s → ISO booted %s (%d MiB ISO); reboot → ISO booted again %s; release → powered off, available %s",
		prepared.Round(time.Millisecond), registered.Round(time.Millisecond), scripted.Round(time.Millisecond), attested.Round(time.Millisecond),
		provisioned.Round(time.Millisecond), isoBooted.Round(time.Millisecond), img.ISOSize>>20, rebooted.Round(time.Millisecond), released.Round(time.Millisecond))
}

// liveISOName is the live ISO's name in the boot server's artifacts directory (an image server of its own).
const liveISOName = "live.iso"
