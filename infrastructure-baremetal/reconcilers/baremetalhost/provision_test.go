package baremetalhost_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/promread"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// claim does to a host what CAPM3 (or our YonderMetalMachine) does when a Machine takes it: consumerRef,
// a disk image (cleaning disabled, so a release is one power-off), the user data Secret, online; mutate
// changes that spec in the same update.
func claim(g Gomega, ns string, h *metal3v1.BareMetalHost, data string, mutate ...func(*metal3v1.BareMetalHost)) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: h.Name + "-user-data-"},
		Data: map[string][]byte{"userData": []byte(data)}}
	g.Expect(env.Create(context.Background(), sec)).To(Succeed())
	patchHost(g, h, func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "YonderMetalMachine", Namespace: ns, Name: "m-" + h.Name}
		h.Spec.Image = &metal3v1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123abcd", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}
		h.Spec.RootDeviceHints = &metal3v1.RootDeviceHints{MinSizeGigabytes: 1}
		h.Spec.AutomatedCleaningMode = metal3v1.CleaningModeDisabled
		h.Spec.UserData = &corev1.SecretReference{Name: sec.Name, Namespace: ns}
		h.Spec.Online = true
		for _, m := range mutate {
			m(h)
		}
	})
}

// release does what CAPM3 does on Machine deletion: image and user data removed, host off, claim cleared.
func release(g Gomega, h *metal3v1.BareMetalHost) {
	patchHost(g, h, func(h *metal3v1.BareMetalHost) {
		h.Spec.Image = nil
		h.Spec.UserData = nil
		h.Spec.Online = false
		h.Spec.ConsumerRef = nil
	})
}

// The provisioning path with the real boot server pieces: a claimed host gets a one-time PXE override
// and a power cycle, its boot fetches an iPXE script with a one-time ticket, attests with its own TPM
// (pinned by this first boot, in the enrolment window the operator opened at registration) and receives exactly
// the user data; the host is provisioned. Releasing it powers it off and makes it available; the second
// provisioning is attested against the pinned TPM.
func TestProvisionAttestDeprovision(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-prov").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:20:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:20:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:20:00:01", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))

	for round := 1; round <= 2; round++ {
		start := time.Now()
		claim(g, ns, h, fmt.Sprintf("bootstrap-data-round-%d", round))
		g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
		t.Logf("round %d: available → provisioned in %s", round, time.Since(start).Round(time.Millisecond))
		// The host's agent writes what it received after the server recorded the release: wait for it.
		g.Eventually(func() []string { _, data, _ := hosts.snapshot("s1"); return data }).Should(HaveLen(round))
		boots, data, errs := hosts.snapshot("s1")
		g.Expect(errs).To(BeEmpty())
		g.Expect(boots).To(Equal(round), "one PXE boot per provisioning")
		g.Expect(data[round-1]).To(Equal(fmt.Sprintf("bootstrap-data-round-%d", round)))
		got := getHost(g, h)
		g.Expect(got.Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation))
		g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.EnrolmentWindowAnnotation), "the first enrolment closes the window")
		g.Expect(got.Status.Provisioning.Image.URL).To(Equal("http://images.example/node.qcow2"))
		g.Expect(got.Status.PoweredOn).To(BeTrue())
		g.Expect(got.Status.ErrorMessage).To(BeEmpty())
		g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(condition(h, baremetalhost.BareMetalHostAttestedCondition)(g).Reason).To(Equal("BootstrapDataReleased"))
		_, ok := lab.inv.HostByMAC(mustMAC("52:54:00:20:00:01"))
		g.Expect(ok).To(BeFalse(), "a provisioned host is no longer served a provisioning boot")

		if round == 2 {
			// The status as a pass leaves it when its state annotation landed and its status patch did not:
			// the next pass derives the condition and clears the attempts' error with the state.
			g.Eventually(func(g Gomega) error {
				lost := getHost(g, h)
				meta.SetStatusCondition(&lost.Status.Conditions, metav1.Condition{Type: baremetalhost.BareMetalHostProvisionedCondition,
					Status: metav1.ConditionFalse, Reason: baremetalhost.BareMetalHostWaitingForPXEBootReason, Message: "status write lost"})
				lost.Status.ErrorType, lost.Status.ErrorMessage, lost.Status.ErrorCount = metal3v1.ProvisioningError, "PXE boot 1 of 2 timed out", 1
				lost.Status.OperationalStatus = metal3v1.OperationalStatusError
				return env.Status().Update(ctx, lost)
			}).Should(Succeed())
			g.Eventually(func(g Gomega) {
				got := getHost(g, h)
				g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
				g.Expect(got.Status.ErrorType).To(BeEmpty())
				g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusOK))
				g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Status).To(Equal(metav1.ConditionTrue))
			}).Should(Succeed())
		}

		start = time.Now()
		release(g, h)
		g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
		t.Logf("round %d: provisioned → available in %s", round, time.Since(start).Round(time.Millisecond))
		got = getHost(g, h)
		g.Expect(got.Status.PoweredOn).To(BeFalse())
		g.Expect(sim.State("s1").PoweredOn).To(BeFalse())
		g.Expect(got.Status.Provisioning.Image.URL).To(BeEmpty())
	}
	// What an operator sees: each state the host entered, each PXE boot, as Events; the time spent
	// provisioning (PXE boot to released bootstrap data) as yonder_metal_phase_seconds.
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, h)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElements(
			"Normal Inspecting: Provisioning state inspecting (new host)",
			HavePrefix("Normal "+baremetalhost.BareMetalHostWaitingForPXEBootReason+": "+baremetalhost.BareMetalHostProvisionedCondition+" is False: PXE boot 1 of 2 requested at "),
			MatchRegexp(`^Normal Available: Provisioning state \S+ → available`),
			MatchRegexp(`^Normal Provisioning: Provisioning state available → provisioning`),
			"Normal "+baremetalhost.PXEBootRequestedEvent+": Attempt 1 of 2: one-time PXE boot set and power action On accepted by the BMC",
			MatchRegexp(`^Normal Provisioned: Provisioning state provisioning → provisioned after \S+$`),
			MatchRegexp(`^Normal Deprovisioning: Provisioning state provisioned → deprovisioning`),
		))
		g.Expect(evs).NotTo(ContainElement(HavePrefix("Warning ")), "a provisioning that went well raises no Warning")
	}).Should(Succeed())
	g.Expect(promread.Sum(metrics.Registry, "yonder_metal_phase_seconds", map[string]string{"state": "provisioning"})).To(BeNumerically(">=", 2))
}

// A host that comes back with another TPM than the one pinned is refused: from its own DHCP lease (Yonder's
// DHCP server leases the addresses), no bootstrap data, an AttestationFailed condition and a provisioning
// error (so no machine controller picks it), powered off.
func TestAttestationFailure(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-att").Name
	lab := startLeasingBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:21:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:21:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:21:00:01", bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = "127.0.0.1" // where its PXE boot asks from
	})
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	claim(g, ns, h, "first")
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	release(g, h)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))

	hosts.add("s1", "52:54:00:21:00:01") // the motherboard (and its TPM) was swapped
	claim(g, ns, h, "second")
	g.Eventually(condition(h, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostAttestationFailedReason), HaveField("Message", ContainSubstring("EK"))))
	got := getHost(g, h)
	g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioning))
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.ProvisioningError))
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeFalse())
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())
	g.Eventually(func() []string { _, _, errs := hosts.snapshot("s1"); return errs }).Should(HaveLen(1), "the second TPM's boot was refused")
	_, data, _ := hosts.snapshot("s1")
	g.Expect(data).To(Equal([]string{"first"}), "nothing released to the other TPM")
	g.Consistently(func() int { b, _, _ := hosts.snapshot("s1"); return b }, "3s").Should(Equal(2), "no automatic retry after a refused attestation")
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, h)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElements(
			HavePrefix("Warning "+baremetalhost.BareMetalHostAttestationFailedReason+": "+baremetalhost.BareMetalHostProvisionedCondition+" is False: "),
			HavePrefix("Warning ProvisioningError: "),
		))
	}).Should(Succeed())

	// Releasing the host clears the error; it is available (and will fail again until an operator re-pins).
	release(g, h)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	g.Expect(getHost(g, h).Status.ErrorType).To(BeEmpty())
}

// A host that never PXE-boots (its NIC is not on the boot network): every attempt times out, is retried
// with backoff, and after MaxProvisionAttempts the host is powered off with a provisioning error that
// says what to check.
func TestPXEBootTimeout(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-pxe").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab) // s1 has no TPM here: its PXE boots reach nothing
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:22:00:01"))
	r := testReconciler(lab.inv)
	r.ProvisionTimeout = 2 * time.Second
	startController(t, r, ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:22:00:01", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	start := time.Now()
	claim(g, ns, h, "never-delivered")
	g.Eventually(func(g Gomega) int { return getHost(g, h).Status.ErrorCount }, "30s").Should(BeNumerically(">=", 2))
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeFalse())
	t.Logf("two attempts timed out in %s", time.Since(start).Round(time.Millisecond))
	got := getHost(g, h)
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.ProvisioningError))
	g.Expect(got.Status.ErrorMessage).To(And(ContainSubstring("did not PXE-boot"), ContainSubstring("PXE boot 2 of 2"), ContainSubstring("52:54:00:22:00:01")))
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Reason).To(Equal(baremetalhost.BareMetalHostPXEBootTimeoutReason))
	g.Consistently(func() int { return sim.State("s1").PXEBoots }, "3s").Should(Equal(2))
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())
}

// mustMAC parses a MAC address the test writes out.
func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// A disk image: the attested ramdisk receives write-image instructions (image, hints, user data) and
// reports; a failed write is retried by a new PXE boot, a written image makes the host boot its disk
// (a persistent override) and provisioned. Released with automatedCleaningMode metadata, the host
// PXE-boots once more to clean its disks before it is available; with cleaning disabled it is not booted.
func TestDiskImageProvisionRetryAndCleaning(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-disk").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:2e:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:2e:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:2e:00:01", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	diskImage := func(mode metal3v1.AutomatedCleaningMode) func(*metal3v1.BareMetalHost) {
		return func(h *metal3v1.BareMetalHost) {
			h.Spec.Image = &metal3v1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123abcd", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}
			h.Spec.RootDeviceHints = &metal3v1.RootDeviceHints{MinSizeGigabytes: 1}
			h.Spec.AutomatedCleaningMode = mode
			h.Spec.BootMode = metal3v1.UEFI // sent with every boot override (the emulator starts legacy)
		}
	}

	hosts.mu.Lock()
	hosts.failWrites["s1"] = 1
	hosts.mu.Unlock()
	claim(g, ns, h, "disk-round-1", diskImage(metal3v1.CleaningModeMetadata))
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateProvisioned))
	// The failed write's condition lasts only until the retry boot (RetryInterval, 1 s here), which a
	// loaded machine's poll can miss; its Event stays, and carries the condition's message.
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, h)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElement(And(
			HavePrefix("Warning "+baremetalhost.BareMetalHostImageWriteFailedReason+": "+baremetalhost.BareMetalHostProvisionedCondition+" is False: "),
			ContainSubstring("checksum mismatch"))), "the ramdisk's reason is shown")
	}).Should(Succeed())
	// The host records what it received after its report returns, and the controller acts on the report
	// as soon as it is stored: wait for the host's record, as TestProvisionAttestDeprovision waits for the data.
	var actions []string
	g.Eventually(func(g Gomega) {
		var diskBoots int
		actions, diskBoots = hosts.disk("s1")
		g.Expect(diskBoots).To(Equal(1))
		g.Expect(actions).To(HaveLen(2))
	}).Should(Succeed())
	boots, data, errs := hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(2), "the failed write cost one more PXE boot")
	g.Expect(sim.State("s1").BootMode).To(Equal("UEFI"), "spec.bootMode went with the boot overrides")
	g.Expect(actions).To(Equal([]string{wire.ActionWriteImage, wire.ActionWriteImage}))
	g.Expect(data).To(Equal([]string{"disk-round-1", "disk-round-1"}))
	g.Expect(sim.State("s1").Override).To(Equal("Hdd"), "every later boot boots the disk")
	got := getHost(g, h)
	g.Expect(got.Status.ErrorMessage).To(BeEmpty())
	g.Expect(got.Status.Provisioning.Image.URL).To(Equal("http://images.example/node.qcow2"))
	g.Expect(got.Annotations[baremetalhost.ReportAnnotation]).To(ContainSubstring(`"success":true`))
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.ReportTokenAnnotation), "the report consumed its token")
	g.Expect(got.Status.HardwareDetails.NIC).To(ContainElement(And(HaveField("MAC", "52:54:00:2e:00:01"), HaveField("IP", "127.0.0.1"))),
		"the boot NIC's IP is the address the host attested from")
	g.Expect(got.Status.HardwareDetails.Hostname).NotTo(BeEmpty())

	release(g, h)
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func() []string { actions, _ = hosts.disk("s1"); return actions }).Should(HaveLen(3), "the cleaning boot's instructions, recorded after its report")
	boots, _, errs = hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(3), "one cleaning boot")
	g.Expect(actions[len(actions)-1]).To(Equal(wire.ActionClean))
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Message).To(ContainSubstring("disk metadata cleaned"))
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())

	claim(g, ns, h, "disk-round-2", diskImage(metal3v1.CleaningModeDisabled))
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateProvisioned))
	release(g, h)
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateAvailable))
	boots, _, _ = hosts.snapshot("s1")
	g.Expect(boots).To(Equal(4), "cleaning disabled: no cleaning boot")
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Message).To(ContainSubstring("cleaning disabled"))
}

// liveISOOrigin serves an ISO-shaped blob (the volume descriptors' magic where iPXE reads them) as a
// user's image server does, and counts its downloads.
func liveISOOrigin(t *testing.T) (url, sum string, downloads *atomic.Int32) {
	t.Helper()
	iso := make([]byte, 1<<20)
	for i := range iso {
		iso[i] = byte(i * 7)
	}
	copy(iso[32769:], "CD001")
	copy(iso[34817:], "CD001")
	d := sha256.Sum256(iso)
	downloads = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		downloads.Add(1)
		http.ServeContent(w, r, "live.iso", time.Time{}, bytes.NewReader(iso))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/live.iso", hex.EncodeToString(d[:]), downloads
}

// A live ISO the Metal3 way, with the real boot server pieces: the boot server downloads the ISO and
// verifies it before the host is powered on; the host attests (its TPM pinned) and is released the live
// instructions with no user data; the controller sets a persistent PXE boot and cycles it, and its boot
// script SAN-boots the ISO from the boot server (/live/), whose blocks it reads by range. A second host
// naming an ISO that does not match its checksum is never powered on: LiveISOUnavailable, both digests
// named. A manager restart (empty cache and boot table) fetches and serves the ISO again while the host
// stays provisioned. Released, the first host is powered off without a cleaning boot and the ISO leaves
// the cache.
func TestLiveISOBootedAfterAttestation(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-live").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("l1", "52:54:00:1f:00:01")
	hosts.add("l2", "52:54:00:1f:00:02")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("l1", "52:54:00:1f:00:01"))
	sim.AddSystem(redfishsim.DefaultSystem("l2", "52:54:00:1f:00:02"))
	r := testReconciler(lab.inv)
	r.LiveISOs = lab.isos
	startController(t, r, ns)
	h := newHost(g, ns, "h1", sim, "l1", "52:54:00:1f:00:01", bmcPass)
	bad := newHost(g, ns, "h2", sim, "l2", "52:54:00:1f:00:02", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(state(bad)).Should(Equal(metal3v1.StateAvailable))
	url, sum, downloads := liveISOOrigin(t)
	live := func(checksum string) func(*metal3v1.BareMetalHost) {
		return func(h *metal3v1.BareMetalHost) {
			h.Spec.Image = &metal3v1.Image{URL: url, Checksum: checksum, ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("live-iso")}
			h.Spec.RootDeviceHints, h.Spec.UserData = nil, nil // Metal3: neither is used with a live ISO
		}
	}

	wrong := strings.Repeat("0", 64)
	claim(g, ns, bad, "unused", live(wrong))
	g.Eventually(condition(bad, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostLiveISOUnavailableReason),
		HaveField("Message", And(ContainSubstring(sum), ContainSubstring(wrong)))))
	g.Expect(getHost(g, bad).Status.ErrorType).To(Equal(metal3v1.ProvisioningError))

	claim(g, ns, h, "unused", live(sum))
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func() int { hosts.mu.Lock(); defer hosts.mu.Unlock(); return hosts.liveBoots["l1"] }).Should(Equal(1), "the host SAN-booted its ISO")
	boots, data, errs := hosts.snapshot("l1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(2), "the attestation's PXE boot, then the ISO's")
	g.Expect(data).To(Equal([]string{""}), "no user data for a live ISO")
	actions, diskBoots := hosts.disk("l1")
	g.Expect(actions).To(Equal([]string{wire.ActionLive}))
	g.Expect(diskBoots).To(BeZero())
	g.Expect(sim.State("l1").PXEBoots).To(Equal(2), "the attestation's one-time PXE boot, then the ISO's persistent one")
	g.Expect(sim.State("l1").Override).To(Equal("Pxe"), "a persistent network boot")
	entry, ok := lab.inv.HostByMAC(mustMAC("52:54:00:1f:00:01"))
	g.Expect(ok).To(BeTrue())
	g.Expect(entry.LeaseOnly).To(BeFalse())
	g.Expect(entry.Boot.LiveISO).To(HavePrefix("/live/"))
	got := getHost(g, h)
	g.Expect(got.Status.Provisioning.Image.URL).To(Equal(url))
	g.Expect(got.Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation), "the host attested before it was switched to the ISO")
	g.Expect(downloads.Load()).To(BeNumerically("<=", 2), "the ISO was downloaded once for the good host (and once for the bad one)")
	g.Consistently(func() int { return sim.State("l2").PXEBoots }, "2s").Should(BeZero(), "an ISO that fails its checksum is never booted")

	// A restarted manager's cache and boot table are empty: the provisioned host's next passes fetch the
	// ISO again and serve its script again, while the host stays provisioned without error.
	fetched := downloads.Load()
	lab.isos.Keep(nil)
	lab.inv.Delete(mustMAC("52:54:00:1f:00:01"))
	g.Eventually(func(g Gomega) {
		e, ok := lab.inv.HostByMAC(mustMAC("52:54:00:1f:00:01"))
		g.Expect(ok).To(BeTrue())
		g.Expect(e.Boot.LiveISO).To(Equal(entry.Boot.LiveISO))
	}).Should(Succeed())
	g.Expect(downloads.Load()).To(BeNumerically(">", fetched), "fetched again (the bad host's retries share the origin)")
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(getHost(g, h).Status.ErrorType).To(BeEmpty())

	release(g, h)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Message).To(ContainSubstring("the host ran its live ISO"))
	g.Expect(sim.State("l1").PXEBoots).To(Equal(2), "no cleaning boot")
	rsp, err := http.Get(lab.base + entry.Boot.LiveISO)
	g.Expect(err).NotTo(HaveOccurred())
	_ = rsp.Body.Close()
	g.Expect(rsp.StatusCode).To(Equal(http.StatusNotFound), "the released host's ISO left the cache")
}
