package baremetalhost_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// A host written for Metal3 goes registering → inspecting → available: the BMC certificate is pinned (no
// TPM enrolment window is opened),
// status.hardware holds the Redfish inventory (GPUs in an annotation and labels), the host stays powered off, and
// one Redfish session serves every pass (kept between them), logged out when the host is deleted. A host
// without the opt-in label is never touched.
func TestRegisterInspectAvailable(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-reg").Name
	sim := startSim(t, nil)
	spec := redfishsim.DefaultSystem("s1", "52:54:00:10:00:01")
	spec.GPUs = []redfishsim.GPU{{Vendor: "NVIDIA", Model: "H100"}, {Vendor: "NVIDIA", Model: "H100"}}
	// A BMC that knows the OS's name and addresses (they become the Machine's addresses).
	spec.Hostname = "Node-S1.example.com"
	spec.NICs[0].IPs = []string{"10.1.2.3", "fe80::1", "fd00::3"}
	sim.AddSystem(spec)
	sim.AddSystem(redfishsim.DefaultSystem("s2", "52:54:00:10:00:02"))
	startController(t, testReconciler(nil), ns)

	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:10:00:01", bmcPass, func(h *metal3v1.BareMetalHost) {
		delete(h.Annotations, baremetalhost.EnrolmentWindowAnnotation)
	})
	other := newHost(g, ns, "not-ours", sim, "s2", "52:54:00:10:00:02", bmcPass, func(h *metal3v1.BareMetalHost) { h.Labels = nil })

	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	got := getHost(g, h)
	g.Expect(got.Annotations[baremetalhost.CertPinAnnotation]).To(Equal(sim.CertSHA256()))
	g.Expect(got.Annotations[baremetalhost.GPUsAnnotation]).To(ContainSubstring("H100"))
	// Selectors cannot read annotations: the GPUs are also labels, written with the move to available.
	g.Expect(got.Labels).To(HaveKeyWithValue(baremetalhost.GPUCountLabel, "2"))
	g.Expect(got.Labels).To(HaveKeyWithValue(baremetalhost.GPUVendorLabel, "nvidia"))
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.EnrolmentWindowAnnotation), "enrolment is never opened automatically")
	g.Expect(got.Finalizers).To(ContainElement(baremetalhost.Finalizer))
	hw := got.Status.HardwareDetails
	g.Expect(hw).NotTo(BeNil())
	g.Expect(hw.CPU.Count).To(Equal(8))
	g.Expect(hw.CPU.Arch).To(Equal("x86_64"))
	g.Expect(hw.RAMMebibytes).To(Equal(16384))
	g.Expect(hw.NIC).To(ConsistOf(metal3v1.NIC{Name: "nic0", MAC: "52:54:00:10:00:01", SpeedGbps: 10, IP: "10.1.2.3"},
		metal3v1.NIC{Name: "nic0", MAC: "52:54:00:10:00:01", SpeedGbps: 10, IP: "fd00::3"}), "one entry per address, as Metal3 lists them; link-local left out")
	g.Expect(hw.Hostname).To(Equal("node-s1.example.com"))
	g.Expect(hw.Storage).To(HaveLen(1))
	g.Expect(hw.Storage[0].Type).To(Equal(metal3v1.SSD))
	g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusOK))
	g.Expect(got.Status.ErrorMessage).To(BeEmpty())
	g.Expect(got.Status.GoodCredentials.Reference).NotTo(BeNil())
	g.Expect(got.Status.PoweredOn).To(BeFalse())
	g.Expect(got.Status.OperationHistory.Register.End.IsZero()).To(BeFalse())
	g.Expect(got.Status.OperationHistory.Inspect.End.IsZero()).To(BeFalse())
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())
	g.Expect(sim.SessionsOpened()).To(Equal(1), "registration and inspection share one session")
	g.Expect(sim.Sessions()).To(Equal(1), "the session is kept for the next pass")

	// spec.online powers the available host on, and off again.
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.Online = true })
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeTrue())
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	g.Expect(sim.State("s1").PXEBoots).To(BeZero(), "powering on an available host boots its normal order")
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.Online = false })
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeFalse())
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())

	g.Consistently(func(g Gomega) metal3v1.BareMetalHostStatus { return getHost(g, other).Status }, "2s").Should(BeZero())
	g.Expect(sim.State("s2").Requests).To(BeZero())

	// Deleting the host powers it off and removes the finalizer.
	g.Expect(env.Delete(ctx, h)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(h), &metal3v1.BareMetalHost{}))
	}).Should(BeTrue())
	g.Eventually(sim.Sessions).Should(BeZero(), "the deleted host's session is logged out")
	g.Expect(sim.SessionsOpened()).To(Equal(1), "the power changes used the kept session too")
}

// availableHost starts the controller for a new namespace with one host (boot MAC mac: each test its own,
// as tests run in parallel and the controller compares boot MACs across namespaces) on a fresh emulator
// and waits until the host is available.
func availableHost(t *testing.T, g *WithT, prefix, mac string) (*redfishsim.Server, *metal3v1.BareMetalHost) {
	t.Helper()
	ns := env.CreateNamespace(context.Background(), t, prefix).Name
	sim := startSim(t, nil)
	sim.AddSystem(redfishsim.DefaultSystem("s1", mac))
	startController(t, testReconciler(nil), ns)
	h := newHost(g, ns, "h1", sim, "s1", mac, bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	return sim, h
}

// A kept session the BMC ended (its SessionTimeout, a BMC reboot) is not mistaken for rejected
// credentials: the next pass opens a new session and the host carries on with it. A host opted out of
// Yonder has its session logged out.
func TestExpiredBMCSession(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	sim, h := availableHost(t, g, "bmh-sess", "52:54:00:12:00:01")
	g.Expect(sim.SessionsOpened()).To(Equal(1))

	sim.ExpireSessions()
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.Online = true })
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeTrue())
	got := getHost(g, h)
	g.Expect(got.Status.ErrorType).To(BeEmpty(), "an expired session is no credential error")
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, baremetalhost.BareMetalHostBMCAccessibleCondition)).To(HaveField("Status", metav1.ConditionTrue))
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	g.Expect(sim.SessionsOpened()).To(Equal(2), "one new session after the expired one")
	g.Expect(sim.Sessions()).To(Equal(1))

	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.Online = false })
	g.Eventually(func(g Gomega) bool { return getHost(g, h).Status.PoweredOn }).Should(BeFalse())
	g.Expect(sim.SessionsOpened()).To(Equal(2), "unchanged credentials keep the session")
	g.Expect(sim.Sessions()).To(Equal(1))

	// Opted out: the host is no longer ours, and neither is its session.
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { delete(h.Labels, baremetalhost.ManagedLabel) })
	g.Eventually(sim.Sessions).Should(BeZero())
}

// endSessionsAfterRegistration is a Dialer whose first client calls end once the registering pass's
// system read through it was answered, between that pass and the inspecting pass: what a BMC does when
// it reboots or drops its sessions then.
func endSessionsAfterRegistration(end func()) redfish.Dialer {
	var once sync.Once
	var dials atomic.Int32
	return func(ctx context.Context, cfg redfish.Config) (redfish.Client, error) {
		c, err := redfish.Dial(ctx, cfg)
		if err != nil || dials.Add(1) > 1 {
			return c, err
		}
		return systemHook{Client: c, after: func() { once.Do(end) }}, nil
	}
}

// systemHook calls after each answered system read.
type systemHook struct {
	redfish.Client
	after func()
}

func (c systemHook) System(ctx context.Context) (*redfish.System, error) {
	sys, err := c.Client.System(ctx)
	if err == nil {
		c.after()
	}
	return sys, err
}

// The inspecting pass trusts the session registration proved moments before, without a read that only
// proves it again. When the BMC ended that session in between, the inspection still succeeds in the same
// pass on a new session — never an InspectionError and a retry interval lost (one hour here); when the
// BMC is gone, the host has the registration error it had before the read was skipped.
func TestSessionEndedBeforeInspection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(*redfishsim.Server) func()
		want func(g *WithT, sim *redfishsim.Server, h *metal3v1.BareMetalHost)
	}{{
		name: "sessions expired",
		end:  func(sim *redfishsim.Server) func() { return sim.ExpireSessions },
		want: func(g *WithT, sim *redfishsim.Server, h *metal3v1.BareMetalHost) {
			g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
			got := getHost(g, h)
			g.Expect(got.Status.HardwareDetails).NotTo(BeNil())
			g.Expect(got.Status.ErrorType).To(BeEmpty())
			g.Expect(got.Status.ErrorCount).To(BeZero(), "no error was ever recorded")
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, baremetalhost.BareMetalHostBMCAccessibleCondition)).To(HaveField("Status", metav1.ConditionTrue))
			g.Expect(sim.SessionsOpened()).To(Equal(2), "one new session after the ended one")
			g.Expect(sim.Sessions()).To(Equal(1))
		},
	}, {
		name: "BMC gone",
		end:  func(sim *redfishsim.Server) func() { return sim.Close },
		want: func(g *WithT, _ *redfishsim.Server, h *metal3v1.BareMetalHost) {
			g.Eventually(condition(h, baremetalhost.BareMetalHostBMCAccessibleCondition)).Should(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostBMCUnreachableReason)))
			got := getHost(g, h)
			g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateInspecting))
			g.Expect(got.Status.ErrorType).To(Equal(metal3v1.RegistrationError))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, baremetalhost.BareMetalHostInspectedCondition)).To(
				Or(BeNil(), Not(HaveField("Reason", baremetalhost.BareMetalHostInspectionFailedReason))), "the BMC, not the inspection, failed")
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := env.CreateNamespace(context.Background(), t, "bmh-trust").Name
			sim := startSim(t, nil)
			sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:12:00:02"))
			r := testReconciler(nil)
			r.RetryInterval = time.Hour
			r.Dial = endSessionsAfterRegistration(tc.end(sim))
			startController(t, r, ns)
			h := newHost(g, ns, "h1", sim, "s1", "52:54:00:12:00:02", bmcPass)
			tc.want(g, sim, h)
		})
	}
}

// Registering, inspecting and settling the power of an available host take 14 Redfish requests: the
// service root and a session, the system read that proves the credentials and the system path, ten
// inventory reads, and the available pass's power read. The inspecting pass reads no system: the session
// was proven by registration moments before. A pass that runs again at the settled version (an event the
// cache delivers after the settling pass) reads nothing: the power is read again at the poll
// (TestSettledHostIsNotReadAgainBeforeItsPoll).
func TestRegisterInspectRequests(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ns := env.CreateNamespace(context.Background(), t, "bmh-req").Name
	sim := startSim(t, nil)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:12:00:03"))
	r := testReconciler(nil)
	r.PowerPollInterval = time.Hour
	startController(t, r, ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:12:00:03", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func(g Gomega) *metal3v1.HardwareDetails { return getHost(g, h).Status.HardwareDetails }).ShouldNot(BeNil())
	g.Eventually(sim.TotalRequests).Should(BeNumerically(">=", 14))
	// Settled: the count has not moved for 2 s.
	settled, since := sim.TotalRequests(), time.Now()
	g.Eventually(func() bool {
		if n := sim.TotalRequests(); n != settled {
			settled, since = n, time.Now()
		}
		return time.Since(since) >= 2*time.Second
	}, time.Minute, 100*time.Millisecond).Should(BeTrue())
	reqs := sim.RecentRequests()
	g.Expect(reqs).To(HaveLen(int(settled)))
	const system = "GET /redfish/v1/Systems/s1"
	log := strings.Join(reqs, "\n")
	// Registration and inspection: 13 requests, each once; the system once, before the inventory.
	g.Expect(reqs[:3]).To(Equal([]string{"GET /redfish/v1/", "POST /redfish/v1/SessionService/Sessions", system}), log)
	seen := map[string]bool{}
	for _, q := range reqs[:13] {
		g.Expect(seen).NotTo(HaveKey(q), "read twice before the host settled:\n%s", log)
		seen[q] = true
	}
	// Then the power read of the available pass, and nothing after it.
	g.Expect(reqs[13:]).To(Equal([]string{system}), log)
}

// Wrong credentials: the host stays registering with a registration error that names the Secret; fixing
// the Secret registers it without any other intervention.
func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-cred").Name
	sim := startSim(t, nil)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:11:00:01"))
	startController(t, testReconciler(nil), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:11:00:01", "wrong")

	g.Eventually(condition(h, baremetalhost.BareMetalHostBMCAccessibleCondition)).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostCredentialsRejectedReason),
		HaveField("Message", ContainSubstring("h1-bmc"))))
	got := getHost(g, h)
	g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateRegistering))
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.RegistrationError))
	g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusError))
	g.Expect(got.Status.HardwareDetails).To(BeNil())

	sec := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "h1-bmc"}, sec)).To(Succeed())
	sec.Data["password"] = []byte(bmcPass)
	g.Expect(env.Update(ctx, sec)).To(Succeed())
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	got = getHost(g, h)
	g.Expect(got.Status.ErrorType).To(BeEmpty())
	g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusOK))
}

// A BMC whose certificate changes after registration is refused with a clear error until an operator
// removes the pin; then the new certificate is pinned and the host recovers.
func TestChangedBMCCertificate(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	sim, h := availableHost(t, g, "bmh-cert", "52:54:00:12:00:04")
	oldPin := getHost(g, h).Annotations[baremetalhost.CertPinAnnotation]

	g.Expect(sim.RotateCertificate()).To(Succeed())
	g.Eventually(condition(h, baremetalhost.BareMetalHostBMCAccessibleCondition)).Should(And(
		HaveField("Reason", baremetalhost.BareMetalHostCertificateChangedReason),
		HaveField("Message", ContainSubstring(sim.CertSHA256())),
		HaveField("Message", ContainSubstring(baremetalhost.CertPinAnnotation))))
	got := getHost(g, h)
	g.Expect(got.Status.ErrorType).To(Equal(metal3v1.RegistrationError))
	g.Expect(got.Annotations[baremetalhost.CertPinAnnotation]).To(Equal(oldPin), "the pin is never replaced by the controller")

	patchHost(g, h, func(h *metal3v1.BareMetalHost) { delete(h.Annotations, baremetalhost.CertPinAnnotation) })
	g.Eventually(func(g Gomega) string { return getHost(g, h).Annotations[baremetalhost.CertPinAnnotation] }).Should(Equal(sim.CertSHA256()))
	g.Eventually(func(g Gomega) metal3v1.ErrorType { return getHost(g, h).Status.ErrorType }).Should(BeEmpty())
}

// Fields Yonder does not implement are refused with a condition naming them, and the BMC is not touched.
func TestUnsupportedFieldsRejected(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-unsup").Name
	sim := startSim(t, nil)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:13:00:01"))
	startController(t, testReconciler(nil), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:13:00:01", bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Spec.RAID = &metal3v1.RAIDConfig{SoftwareRAIDVolumes: []metal3v1.SoftwareRAIDVolume{{Level: "1"}}}
		h.Spec.Image = &metal3v1.Image{URL: "http://images/ubuntu.vmdk", Checksum: "abc", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("vmdk")}
	})
	g.Eventually(condition(h, baremetalhost.BareMetalHostSpecSupportedCondition)).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostUnsupportedFieldsReason),
		HaveField("Message", ContainSubstring("spec.raid")), HaveField("Message", ContainSubstring("spec.image.format=vmdk"))))
	g.Expect(getHost(g, h).Status.ErrorType).To(Equal(metal3v1.RegistrationError))
	g.Expect(sim.State("s1").Requests).To(BeZero())

	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.RAID = nil; h.Spec.Image = nil })
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	g.Expect(getHost(g, h).Status.ErrorType).To(BeEmpty())
}
