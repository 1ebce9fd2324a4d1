package baremetalhost_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

const movedImageURL = "http://images.example/moved.img"

// movedHost is a host as `clusterctl move` recreates one that Metal3's baremetal-operator provisioned: no
// status, no Yonder state annotation, the status copy in baremetalhost.metal3.io/status.
func movedHost(g Gomega) func(*metal3v1.BareMetalHost) {
	return func(h *metal3v1.BareMetalHost) {
		img := metal3v1.Image{URL: movedImageURL, Checksum: "0123abcd", ChecksumType: metal3v1.SHA256}
		st := metal3v1.BareMetalHostStatus{
			OperationalStatus: metal3v1.OperationalStatusOK,
			PoweredOn:         true,
			Provisioning:      metal3v1.ProvisionStatus{State: metal3v1.StateProvisioned, Image: img},
			HardwareDetails:   &metal3v1.HardwareDetails{Hostname: "from-status-annotation", RAMMebibytes: 4096, CPU: metal3v1.CPU{Count: 2}},
		}
		raw, err := json.Marshal(st)
		g.Expect(err).NotTo(HaveOccurred())
		h.Annotations[metal3v1.StatusAnnotation] = string(raw)
		h.Spec.Image = &img
		h.Spec.Online = true
	}
}

func annotate(g Gomega, h *metal3v1.BareMetalHost, kv map[string]*string) {
	patchHost(g, h, func(h *metal3v1.BareMetalHost) {
		for k, v := range kv {
			if v == nil {
				delete(h.Annotations, k)
			} else {
				h.Annotations[k] = *v
			}
		}
	})
}

func str(s string) *string { return &s }

// hostEvents lists the messages of the host's Events with this reason.
func hostEvents(g Gomega, h *metal3v1.BareMetalHost, reason string) []string {
	var list corev1.EventList
	g.Expect(env.GetAPIReader().List(context.Background(), &list, client.InNamespace(h.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == h.Name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// A host moved from Metal3 is rebuilt from baremetalhost.metal3.io/status — provisioned with its image and
// hardware, not provisioned again — and the copy is removed. CAPM3's reboot annotations then drive its power:
// reboot.metal3.io reboots it once and is removed; reboot.metal3.io/<key> keep it off (across a controller
// restart) until the last one is removed, and the hard mode of one wins.
func TestMetal3StatusAndRebootAnnotations(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-reboot").Name
	drv := redfishsim.NewMemoryDriver()
	sim := startSim(t, drv)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:70:00:01"))
	proc := startController(t, testReconciler(nil), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:70:00:01", bmcPass, movedHost(g))

	g.Eventually(func(g Gomega) {
		got := getHost(g, h)
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(got.Status.Provisioning.Image.URL).To(Equal(movedImageURL))
		g.Expect(got.Status.HardwareDetails).NotTo(BeNil())
		g.Expect(got.Status.HardwareDetails.Hostname).To(Equal("from-status-annotation"), "restored, not re-read over Redfish")
		g.Expect(got.Annotations).NotTo(HaveKey(metal3v1.StatusAnnotation))
		g.Expect(got.Annotations[baremetalhost.StateAnnotation]).To(ContainSubstring(`"state":"provisioned"`))
		g.Expect(got.Status.PoweredOn).To(BeTrue())
		// status.poweredOn comes restored from the copy; the BMC's power is what the controller settles.
		g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	}).Should(Succeed())
	g.Expect(sim.State("s1").PXEBoots).To(BeZero(), "a restored provisioned host is not provisioned again")
	boots := len(drv.Boots("s1"))

	// One reboot (soft: the emulator's OS obeys GracefulShutdown), then the annotation is gone.
	annotate(g, h, map[string]*string{metal3v1.RebootAnnotationPrefix: str("")})
	g.Eventually(func(g Gomega) {
		g.Expect(getHost(g, h).Annotations).NotTo(HaveKey(metal3v1.RebootAnnotationPrefix))
		g.Expect(drv.Boots("s1")).To(HaveLen(boots + 1))
		g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
	}).Should(Succeed())
	g.Consistently(func() []string { return drv.Boots("s1") }, 2*time.Second).Should(HaveLen(boots+1), "one reboot per annotation")
	got := getHost(g, h)
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.RebootPowerOffAnnotation))
	g.Expect(got.Status.Conditions).NotTo(ContainElement(HaveField("Type", baremetalhost.BareMetalHostRebootRequestedCondition)))

	// Two owners hold the host off; one asks for hard.
	annotate(g, h, map[string]*string{
		metal3v1.RebootAnnotationPrefix + "/remediation": str(`{"mode":"hard"}`),
		metal3v1.RebootAnnotationPrefix + "/maintenance": str(""),
	})
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeFalse())
	g.Eventually(condition(h, baremetalhost.BareMetalHostRebootRequestedCondition)).Should(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", baremetalhost.BareMetalHostPoweredOffByAnnotationReason)))
	g.Eventually(func(g Gomega) []string { return hostEvents(g, h, baremetalhost.RebootPowerOffEvent) }).Should(ContainElement(ContainSubstring("Powering off (ForceOff)")), "hard mode wins")

	// A restarted controller keeps it off: the state is the annotations and the BMC's power.
	proc.Stop()
	startController(t, testReconciler(nil), ns)
	annotate(g, h, map[string]*string{metal3v1.RebootAnnotationPrefix + "/remediation": nil})
	g.Consistently(func() bool { return sim.State("s1").PoweredOn }, 3*time.Second).Should(BeFalse(), "still held by maintenance")
	g.Expect(getHost(g, h).Status.PoweredOn).To(BeFalse())

	annotate(g, h, map[string]*string{metal3v1.RebootAnnotationPrefix + "/maintenance": nil})
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		got := getHost(g, h)
		g.Expect(got.Status.PoweredOn).To(BeTrue())
		g.Expect(got.Status.Conditions).NotTo(ContainElement(HaveField("Type", baremetalhost.BareMetalHostRebootRequestedCondition)))
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	}).Should(Succeed())
	g.Expect(sim.State("s1").PXEBoots).To(BeZero())

	// A host that may never be off is rebooted in one action, and cannot be held off.
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.DisablePowerOff = true })
	boots = len(drv.Boots("s1"))
	annotate(g, h, map[string]*string{metal3v1.RebootAnnotationPrefix: str(""), metal3v1.RebootAnnotationPrefix + "/maintenance": str("")})
	g.Eventually(func(g Gomega) {
		got := getHost(g, h)
		g.Expect(got.Annotations).NotTo(HaveKey(metal3v1.RebootAnnotationPrefix))
		g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.RebootPowerOffAnnotation))
		g.Expect(drv.Boots("s1")).To(HaveLen(boots + 1))
	}).Should(Succeed())
	g.Eventually(condition(h, baremetalhost.BareMetalHostRebootRequestedCondition)).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostPowerOffDisabledReason)))
	g.Consistently(func() []string { return drv.Boots("s1") }, 2*time.Second).Should(HaveLen(boots+1), "one reboot, and the host stays on")
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue())
}

// deafOS is a BMC whose operating system ignores the ACPI power button: GracefulShutdown is accepted and
// nothing happens. The emulator's OS always obeys, so this wraps the real client to count and drop it.
type deafOS struct {
	redfish.Client
	soft *atomic.Int32
}

func (d deafOS) Power(ctx context.Context, a redfish.PowerAction) error {
	if a == redfish.PowerSoftOff {
		d.soft.Add(1)
		return nil
	}
	return d.Client.Power(ctx, a)
}

// A soft reboot request whose OS does not shut down is forced off after SoftPowerOffTimeout; the deadline
// is on the host, so a controller restarted in between neither sends the shutdown again nor waits anew.
func TestSoftRebootFallsBackToForceOff(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-softoff").Name
	sim := startSim(t, redfishsim.NewMemoryDriver())
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:71:00:01"))
	var soft atomic.Int32
	newReconciler := func() *baremetalhost.Reconciler {
		r := testReconciler(nil)
		r.SoftPowerOffTimeout = 4 * time.Second
		r.Dial = func(ctx context.Context, cfg redfish.Config) (redfish.Client, error) {
			c, err := redfish.Dial(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return deafOS{Client: c, soft: &soft}, nil
		}
		return r
	}
	proc := startController(t, newReconciler(), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:71:00:01", bmcPass, movedHost(g))
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeTrue())

	annotate(g, h, map[string]*string{metal3v1.RebootAnnotationPrefix + "/capm3": str(`{"mode":"soft"}`)})
	g.Eventually(func() string { return getHost(g, h).Annotations[baremetalhost.RebootPowerOffAnnotation] }).Should(ContainSubstring(`"action":"GracefulShutdown"`))
	proc.Stop()
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue(), "the OS ignored the shutdown")
	startController(t, newReconciler(), ns)

	g.Eventually(func() bool { return sim.State("s1").PoweredOn }, 15*time.Second).Should(BeFalse())
	// The controller may have been stopped between recording the soft power-off and sending it: then the
	// new one waits out the same deadline. Either way it is never sent twice.
	g.Expect(soft.Load()).To(BeNumerically("<=", 1), "the soft power-off is sent at most once, across the restart")
	// The restarted controller's ForceOff is observed through its Events: the PoweringOff condition it
	// passes through lasts only until the deadline (4 s after the first controller's record, which a slow
	// stop and restart can outlast) and then one pass more, so a poll of the condition can miss it.
	g.Eventually(func(g Gomega) []string { return hostEvents(g, h, baremetalhost.SoftPowerOffTimedOutEvent) }).ShouldNot(BeEmpty())
	g.Eventually(func(g Gomega) []string { return hostEvents(g, h, baremetalhost.RebootPowerOffEvent) }).
		Should(ContainElement(ContainSubstring("Powering off (ForceOff)")), "forced off by the restarted controller after the deadline")
	g.Eventually(func(g Gomega) {
		got := getHost(g, h)
		g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.RebootPowerOffAnnotation))
		g.Expect(got.Status.PoweredOn).To(BeFalse())
		g.Expect(condition(h, baremetalhost.BareMetalHostRebootRequestedCondition)(g)).To(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", baremetalhost.BareMetalHostPoweredOffByAnnotationReason)), "held off by the keyed annotation")
	}).Should(Succeed())
	g.Consistently(func() bool { return sim.State("s1").PoweredOn }, 2*time.Second).Should(BeFalse())
}

// inspect.metal3.io="" re-inspects an available host now and is removed; reboot annotations without force
// are not honoured by an available host (BMO's rule), forced ones are. With inspection disabled (the
// annotation's "disabled"), inspect.metal3.io/hardwaredetails gives status.hardware; an invalid one is
// reported and kept.
func TestMetal3InspectAnnotations(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-inspect").Name
	sim := startSim(t, redfishsim.NewMemoryDriver())
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:72:00:01"))
	sim.AddSystem(redfishsim.DefaultSystem("s2", "52:54:00:72:00:02"))
	startController(t, testReconciler(nil), ns)

	h1 := newHost(g, ns, "h1", sim, "s1", "52:54:00:72:00:01", bmcPass, func(h *metal3v1.BareMetalHost) { h.Spec.Online = true })
	g.Eventually(state(h1)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func(g Gomega) int { return getHost(g, h1).Status.HardwareDetails.RAMMebibytes }).Should(Equal(16384))
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeTrue())

	// An available host keeps running for a reboot annotation without force…
	annotate(g, h1, map[string]*string{metal3v1.RebootAnnotationPrefix + "/x": str("")})
	g.Consistently(func() bool { return sim.State("s1").PoweredOn }, 2*time.Second).Should(BeTrue())
	// …and is held off by a forced one.
	annotate(g, h1, map[string]*string{metal3v1.RebootAnnotationPrefix + "/x": str(`{"mode":"hard","force":true}`)})
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeFalse())
	annotate(g, h1, map[string]*string{metal3v1.RebootAnnotationPrefix + "/x": nil})
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeTrue())

	// The BMC now reports more memory (a DIMM was added); the request re-reads the inventory.
	spec := redfishsim.DefaultSystem("s1", "52:54:00:72:00:01")
	spec.DIMMsMiB = append(spec.DIMMsMiB, 16384)
	sim.AddSystem(spec)
	annotate(g, h1, map[string]*string{
		metal3v1.InspectAnnotationPrefix: str(""),
		// Ignored and removed: status.hardware is set and inspection is enabled.
		metal3v1.HardwareDetailsAnnotation: str(`{"hostname":"ignored"}`),
	})
	g.Eventually(func(g Gomega) {
		got := getHost(g, h1)
		g.Expect(got.Annotations).NotTo(HaveKey(metal3v1.InspectAnnotationPrefix))
		g.Expect(got.Annotations).NotTo(HaveKey(metal3v1.HardwareDetailsAnnotation))
		g.Expect(got.Status.HardwareDetails.RAMMebibytes).To(Equal(32768))
		g.Expect(got.Status.HardwareDetails.Hostname).NotTo(Equal("ignored"))
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	}).Should(Succeed())

	h2 := newHost(g, ns, "h2", sim, "s2", "52:54:00:72:00:02", bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[metal3v1.InspectAnnotationPrefix] = "disabled"
		h.Annotations[metal3v1.HardwareDetailsAnnotation] = `{"hostname":"given","ramMebibytes":1024,"cpu":{"count":3}}`
	})
	g.Eventually(state(h2)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func(g Gomega) {
		got := getHost(g, h2)
		g.Expect(got.Annotations).NotTo(HaveKey(metal3v1.HardwareDetailsAnnotation))
		g.Expect(got.Annotations).To(HaveKeyWithValue(metal3v1.InspectAnnotationPrefix, "disabled"))
		g.Expect(got.Status.HardwareDetails).NotTo(BeNil())
		g.Expect(got.Status.HardwareDetails.Hostname).To(Equal("given"))
		g.Expect(got.Status.HardwareDetails.CPU.Count).To(Equal(3))
	}).Should(Succeed())
	g.Expect(condition(h2, baremetalhost.BareMetalHostInspectedCondition)(g)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", baremetalhost.BareMetalHostHardwareDetailsAnnotationReason)))

	annotate(g, h2, map[string]*string{metal3v1.HardwareDetailsAnnotation: str(`{"hostname":"x","bogus":1}`)})
	g.Eventually(condition(h2, baremetalhost.BareMetalHostInspectedCondition)).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", baremetalhost.BareMetalHostInvalidHardwareDetailsReason),
		HaveField("Message", ContainSubstring("bogus"))))
	got := getHost(g, h2)
	g.Expect(got.Annotations).To(HaveKey(metal3v1.HardwareDetailsAnnotation), "kept for the operator to fix")
	g.Expect(got.Status.HardwareDetails.Hostname).To(Equal("given"))
}

// A detached host is left alone (operationalStatus detached, no power change) and managed again when the
// annotation goes. Deleting a detached host completes without powering it off; with deleteAction delay the
// deletion waits for the annotation's removal and then runs as for any host.
func TestDetachedHost(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-detached").Name
	sim := startSim(t, redfishsim.NewMemoryDriver())
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:73:00:01"))
	sim.AddSystem(redfishsim.DefaultSystem("s2", "52:54:00:73:00:02"))
	startController(t, testReconciler(nil), ns)

	h1 := newHost(g, ns, "h1", sim, "s1", "52:54:00:73:00:01", bmcPass)
	g.Eventually(state(h1)).Should(Equal(metal3v1.StateAvailable))
	annotate(g, h1, map[string]*string{metal3v1.DetachedAnnotation: str("")})
	g.Eventually(func(g Gomega) metal3v1.OperationalStatus { return getHost(g, h1).Status.OperationalStatus }).
		Should(Equal(metal3v1.OperationalStatusDetached))
	patchHost(g, h1, func(h *metal3v1.BareMetalHost) { h.Spec.Online = true })
	g.Consistently(func() bool { return sim.State("s1").PoweredOn }, 2*time.Second).Should(BeFalse(), "a detached host is not powered")

	annotate(g, h1, map[string]*string{metal3v1.DetachedAnnotation: nil})
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeTrue())
	g.Eventually(func(g Gomega) metal3v1.OperationalStatus { return getHost(g, h1).Status.OperationalStatus }).
		Should(Equal(metal3v1.OperationalStatusOK))

	annotate(g, h1, map[string]*string{metal3v1.DetachedAnnotation: str("")})
	g.Eventually(func(g Gomega) metal3v1.OperationalStatus { return getHost(g, h1).Status.OperationalStatus }).
		Should(Equal(metal3v1.OperationalStatusDetached))
	g.Expect(env.Delete(ctx, h1)).To(Succeed())
	g.Eventually(func() error {
		return env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h1), &metal3v1.BareMetalHost{})
	}).Should(MatchError(ContainSubstring("not found")))
	g.Expect(sim.State("s1").PoweredOn).To(BeTrue(), "a detached host is deleted without a power-off")

	h2 := newHost(g, ns, "h2", sim, "s2", "52:54:00:73:00:02", bmcPass, func(h *metal3v1.BareMetalHost) { h.Spec.Online = true })
	g.Eventually(state(h2)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(func() bool { return sim.State("s2").PoweredOn }).Should(BeTrue())
	annotate(g, h2, map[string]*string{metal3v1.DetachedAnnotation: str(`{"deleteAction":"delay"}`)})
	g.Eventually(func(g Gomega) metal3v1.OperationalStatus { return getHost(g, h2).Status.OperationalStatus }).
		Should(Equal(metal3v1.OperationalStatusDetached))
	g.Expect(env.Delete(ctx, h2)).To(Succeed())
	g.Consistently(func() error {
		return env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h2), &metal3v1.BareMetalHost{})
	}, 2*time.Second).Should(Succeed(), "deletion waits while the host is detached with deleteAction delay")
	annotate(g, h2, map[string]*string{metal3v1.DetachedAnnotation: nil})
	g.Eventually(func() error {
		return env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h2), &metal3v1.BareMetalHost{})
	}).Should(MatchError(ContainSubstring("not found")))
	g.Expect(sim.State("s2").PoweredOn).To(BeFalse(), "an attached host is powered off on deletion")

	// Moved by hand from BMO: created detached with its status copy. The status is restored (provisioned),
	// the host is not registered, powered or provisioned until it is attached, and then stays provisioned.
	sim.AddSystem(redfishsim.DefaultSystem("s3", "52:54:00:73:00:03"))
	h3 := newHost(g, ns, "h3", sim, "s3", "52:54:00:73:00:03", bmcPass, movedHost(g), func(h *metal3v1.BareMetalHost) {
		h.Annotations[metal3v1.DetachedAnnotation] = ""
	})
	g.Eventually(func(g Gomega) {
		got := getHost(g, h3)
		g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusDetached))
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	}).Should(Succeed())
	g.Consistently(func() redfishsim.SystemState { return sim.State("s3") }, 2*time.Second).Should(And(
		HaveField("PoweredOn", BeFalse()), HaveField("Requests", BeZero())), "no BMC traffic while detached")
	g.Expect(getHost(g, h3).Annotations).NotTo(HaveKey(baremetalhost.CertPinAnnotation))
	annotate(g, h3, map[string]*string{metal3v1.DetachedAnnotation: nil})
	g.Eventually(func() bool { return sim.State("s3").PoweredOn }).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		got := getHost(g, h3)
		g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusOK))
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(got.Annotations).To(HaveKey(baremetalhost.CertPinAnnotation))
	}).Should(Succeed())
	g.Expect(sim.State("s3").PXEBoots).To(BeZero())
}
