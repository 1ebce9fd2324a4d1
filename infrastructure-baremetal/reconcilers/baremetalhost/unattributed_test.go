package baremetalhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// strangerHTTP is an HTTP client on the boot LAN at 127.0.0.2, another address than the hosts' 127.0.0.1.
func strangerHTTP() *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	return &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
}

// awaitProvisioned waits (up to a minute) until host ns/name's Provisioned condition matches. It runs on a
// simulated host's goroutine, so it returns the failure instead of failing the test there.
func awaitProvisioned(ns, name string, match types.GomegaMatcher) error {
	var failure string
	g := NewGomega(func(message string, _ ...int) { failure = message })
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if !g.Eventually(condition(h, baremetalhost.BareMetalHostProvisionedCondition)).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(match) {
		return fmt.Errorf("the Provisioned condition of host %s/%s never matched: %s", ns, name, failure)
	}
	return nil
}

// hostEventsOf are the host's Events as "<type> <reason>: <message>".
func hostEventsOf(h *metal3v1.BareMetalHost) func(Gomega) []string {
	return func(g Gomega) []string {
		evs, err := harness.Events(context.Background(), env.Client, h)
		g.Expect(err).NotTo(HaveOccurred())
		return evs
	}
}

// In proxyDHCP mode (the site's DHCP server leases the addresses and the boot server serves a host's
// script to whoever names its MAC), a stranger on the boot LAN fetches the host's script from its own
// address and attests for the host with a TPM of its own (a software TPM whose EK certificate chains to
// the site's roots). It is refused as EKMismatch — the host's EK is registered — exactly as before, but
// that is no evidence against the host: the refusal is recorded as a Warning naming the reason and the
// stranger's address, the host is neither failed nor powered off, and the real host, with its registered
// TPM from its own address, then attests and is provisioned by the same PXE boot.
func TestStrangersRefusalDoesNotStopTheHost(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-stranger").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	const mac = "52:54:00:54:00:01"
	hosts.add("s1", mac)
	hosts.addTPM("stranger", "", swtpm.Start) // the stranger's TPM; no system of the emulator boots with it
	strangerTPM := hosts.tpms["stranger"]
	var mu sync.Mutex
	var strangersTicket, spareTicket, bootServer string
	hosts.bootAs["s1"] = func(mac string, tpm *swtpm.TPM) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The stranger is first: it names the booting host's MAC from 127.0.0.2, twice (it keeps a ticket).
		server, ticket, err := hosts.scriptVia(ctx, strangerHTTP(), mac)
		if err != nil {
			return nil, fmt.Errorf("the stranger's script: %w", err)
		}
		_, spare, err := hosts.scriptVia(ctx, strangerHTTP(), mac)
		if err != nil {
			return nil, fmt.Errorf("the stranger's second script: %w", err)
		}
		mu.Lock()
		strangersTicket, spareTicket, bootServer = ticket, spare, server
		mu.Unlock()
		_, err = attestVia(ctx, strangerHTTP(), server, ticket, strangerTPM)
		var refused *wire.RefusedError
		if !errors.As(err, &refused) || refused.Reason != wire.ReasonEKMismatch || refused.StatusCode != http.StatusForbidden {
			return nil, fmt.Errorf("the stranger's attestation: want 403 %s, got %v", wire.ReasonEKMismatch, err)
		}
		// The host attests only once the controller has seen the stranger's refusal on the host, so the
		// test proves that the recorded refusal leaves the attempt running.
		if err := awaitProvisioned(ns, "h1", And(HaveField("Reason", baremetalhost.BareMetalHostWaitingForPXEBootReason),
			HaveField("Message", And(ContainSubstring("127.0.0.2"), ContainSubstring(wire.ReasonEKMismatch))))); err != nil {
			return nil, err
		}
		return hosts.boot(mac, tpm)
	}
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", mac))
	r := testReconciler(lab.inv)
	r.ProvisionTimeout = 3 * time.Minute // the attempt ends by the host's release, not by a timeout
	startController(t, r, ns)
	h := newHost(g, ns, "h1", sim, "s1", mac, bmcPass, noWindow, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EKFingerprintAnnotation] = ekFingerprint(t, hosts.tpms["s1"])
	})
	t.Cleanup(func() { deleteHost(t, h) })
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	claim(g, ns, h, "data-of-h1")

	g.Eventually(state(h), "2m").Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func() []string { _, d, _ := hosts.snapshot("s1"); return d }).Should(Equal([]string{"data-of-h1"}))
	boots, _, errs := hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(1), "the stranger's refusal neither failed nor retried the attempt")
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	got := getHost(g, h)
	g.Expect(got.Status.ErrorCount).To(BeZero())
	g.Expect(got.Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation), "the registered TPM is pinned, not the stranger's")
	g.Expect(condition(h, baremetalhost.BareMetalHostAttestedCondition)(g).Reason).To(Equal(attest.ReasonReleased))

	// What an operator sees: a Warning naming the reason and the stranger's address, never its ticket.
	mu.Lock()
	ticket := strangersTicket
	mu.Unlock()
	g.Expect(ticket).NotTo(BeEmpty())
	g.Eventually(hostEventsOf(h)).Should(ContainElement(And(
		HavePrefix("Warning "+baremetalhost.UnattributedAttestationRefusalEvent+": "),
		ContainSubstring("from 127.0.0.2"), ContainSubstring(wire.ReasonEKMismatch))))
	evs := hostEventsOf(h)(g)
	g.Expect(evs).NotTo(ContainElement(ContainSubstring(ticket)))
	g.Expect(evs).NotTo(ContainElement(ContainSubstring(baremetalhost.BareMetalHostAttestationFailedReason)))

	// With the ticket it kept, the stranger's refused request after the host's release (any refusal, here a
	// malformed one) replaces neither the release nor the Attested condition: it is recorded apart.
	mu.Lock()
	spare, server := spareTicket, bootServer
	mu.Unlock()
	g.Expect(startMalformed(ctx, strangerHTTP(), server, spare)).To(Succeed())
	g.Eventually(hostEventsOf(h)).Should(ContainElement(And(
		HavePrefix("Warning "+baremetalhost.UnattributedAttestationRefusalEvent+": "),
		ContainSubstring("from 127.0.0.2"), ContainSubstring(wire.ReasonMalformedRequest), ContainSubstring("after the host had received its data"))))
	got = getHost(g, h)
	g.Expect(got.Annotations[baremetalhost.AttestationAnnotation]).To(ContainSubstring(attest.ReasonReleased))
	g.Expect(got.Annotations[baremetalhost.UnattributedRefusalAnnotation]).To(ContainSubstring(wire.ReasonMalformedRequest))
	g.Expect(condition(h, baremetalhost.BareMetalHostAttestedCondition)(g).Reason).To(Equal(attest.ReasonReleased))
	g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
}

// startMalformed opens an attestation session with ticket whose EK and AK public areas do not decode, and
// expects the boot server's 400 MalformedRequest.
func startMalformed(ctx context.Context, hc *http.Client, server, ticket string) error {
	body, _ := json.Marshal(wire.StartRequest{Ticket: ticket, EKPublic: []byte{0, 1}, AKPublic: []byte{0, 1}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, server+wire.PathStart, bytes.NewReader(body))
	rsp, err := hc.Do(req)
	if err != nil {
		return err
	}
	var refusal wire.Refusal
	derr := json.NewDecoder(rsp.Body).Decode(&refusal)
	_ = rsp.Body.Close()
	if derr != nil || rsp.StatusCode != http.StatusBadRequest || refusal.Reason != wire.ReasonMalformedRequest {
		return fmt.Errorf("malformed start: want %s/400, got %d %+v (%v)", wire.ReasonMalformedRequest, rsp.StatusCode, refusal, derr)
	}
	return nil
}

// Where Yonder's DHCP server leases the addresses, a host whose session comes from its own reservation
// and presents another TPM than its registered one still fails at once (EKMismatch: AttestationFailed,
// powered off, no second boot). A host without a reservation is served its script from anywhere, so the
// same refusal of a session from its address is not attributed to it: a Warning names it, the attempt
// runs to its timeout — across a restart of the controller, the refusal being kept on the host — and is
// retried, and the last attempt's error names the refusal and how to re-enrol the host.
func TestFatalRefusalCountsOnlyFromTheHostsLease(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-lease-evidence").Name
	lab := startLeasingBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	macs := map[string]string{"leased": "52:54:00:55:00:01", "unreserved": "52:54:00:55:00:02"}
	for id, mac := range macs {
		hosts.add(id, mac)
	}
	hosts.addTPM("other", "", swtpm.Start) // the TPM of another machine, which both hosts' registrations name
	sim := startSim(t, hosts)
	for id, mac := range macs {
		sim.AddSystem(redfishsim.DefaultSystem(id, mac))
	}
	newReconciler := func() *baremetalhost.Reconciler {
		r := testReconciler(lab.inv)
		r.ProvisionTimeout, r.MaxProvisionAttempts = 12*time.Second, 2
		return r
	}
	proc := startController(t, newReconciler(), ns)
	registerOther := func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EKFingerprintAnnotation] = ekFingerprint(t, hosts.tpms["other"])
	}
	leased := newHost(g, ns, "leased", sim, "leased", macs["leased"], bmcPass, noWindow, registerOther, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = "127.0.0.1" // where its PXE boot asks from
	})
	unreserved := newHost(g, ns, "unreserved", sim, "unreserved", macs["unreserved"], bmcPass, noWindow, registerOther)
	t.Cleanup(func() { deleteHost(t, leased); deleteHost(t, unreserved) })
	for _, h := range []*metal3v1.BareMetalHost{leased, unreserved} {
		g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
		claim(g, ns, h, "data-of-"+h.Name)
	}

	// The host's own lease: a real attestation failure, at once.
	g.Eventually(condition(leased, baremetalhost.BareMetalHostProvisionedCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostAttestationFailedReason), HaveField("Message", ContainSubstring(wire.ReasonEKMismatch))))
	g.Eventually(func() bool { return sim.State("leased").PoweredOn }).Should(BeFalse())

	// No reservation: recorded, not acted on. The controller restarts while the refused attempt runs.
	g.Eventually(hostEventsOf(unreserved)).Should(ContainElement(And(
		HavePrefix("Warning "+baremetalhost.UnattributedAttestationRefusalEvent+": "),
		ContainSubstring("from 127.0.0.1"), ContainSubstring(wire.ReasonEKMismatch))))
	proc.Stop()
	startController(t, newReconciler(), ns)
	// Cleanups run last first: the hosts go while this controller still runs to take their finalizers off.
	t.Cleanup(func() { deleteHost(t, leased); deleteHost(t, unreserved) })
	g.Eventually(condition(unreserved, baremetalhost.BareMetalHostProvisionedCondition), "2m").Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostPXEBootTimeoutReason),
		HaveField("Message", And(ContainSubstring("PXE boot 2 of 2"), ContainSubstring("came from 127.0.0.1"), ContainSubstring(wire.ReasonEKMismatch),
			ContainSubstring(baremetalhost.EnrolmentAnnotation)))))
	g.Eventually(func() bool { return sim.State("unreserved").PoweredOn }).Should(BeFalse(), "out of attempts")
	got := getHost(g, unreserved)
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.ProvisioningError))
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))
	g.Expect(hostEventsOf(unreserved)(g)).NotTo(ContainElement(ContainSubstring(baremetalhost.BareMetalHostAttestationFailedReason)))

	unreservedBoots, data, _ := hosts.snapshot("unreserved")
	g.Expect(data).To(BeEmpty())
	g.Expect(unreservedBoots).To(Equal(2), "the unattributed refusal did not end the first attempt: it timed out and was retried")
	leasedBoots, data, _ := hosts.snapshot("leased")
	g.Expect(data).To(BeEmpty())
	g.Expect(leasedBoots).To(Equal(1), "a failure from the host's own lease is not retried")
}
