package metalmachine

import (
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

func bmh(name, fd string, mod ...func(*metal3v1.BareMetalHost)) metal3v1.BareMetalHost {
	h := metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "1",
		Labels: map[string]string{"pool": "p", infrav1.FailureDomainLabel: fd}, Annotations: map[string]string{}}}
	h.Status.Provisioning.State = metal3v1.StateAvailable
	for _, m := range mod {
		m(&h)
	}
	return h
}

func names(hs []*metal3v1.BareMetalHost) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

func TestCandidatesSkipUnusableHosts(t *testing.T) {
	g := NewWithT(t)
	hosts := []metal3v1.BareMetalHost{
		bmh("ok", "a"),
		bmh("ready", "a", func(h *metal3v1.BareMetalHost) { h.Status.Provisioning.State = metal3v1.StateReady }),
		bmh("paused", "a", func(h *metal3v1.BareMetalHost) { h.Annotations[metal3v1.PausedAnnotation] = "" }),
		bmh("detached", "a", func(h *metal3v1.BareMetalHost) { h.Annotations[metal3v1.DetachedAnnotation] = "" }),
		bmh("error", "a", func(h *metal3v1.BareMetalHost) { h.Status.ErrorType = metal3v1.RegistrationError }),
		bmh("consumed", "a", func(h *metal3v1.BareMetalHost) { h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: "Metal3Machine"} }),
		bmh("inspecting", "a", func(h *metal3v1.BareMetalHost) { h.Status.Provisioning.State = metal3v1.StateInspecting }),
		bmh("provisioned", "a", func(h *metal3v1.BareMetalHost) { h.Status.Provisioning.State = metal3v1.StateProvisioned }),
		bmh("deleting", "a", func(h *metal3v1.BareMetalHost) {
			h.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			h.Finalizers = []string{"x"}
		}),
		bmh("otherpool", "a", func(h *metal3v1.BareMetalHost) { h.Labels["pool"] = "q" }),
	}
	c, err := Candidates(hosts, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}, "", "c1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(c)).To(ConsistOf("ok", "ready"))

	_, err = Candidates(hosts, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Bogus"}}}, "", "c1")
	g.Expect(err).To(HaveOccurred())
}

func TestCandidatesPreferFailureDomainThenSpread(t *testing.T) {
	g := NewWithT(t)
	mine := func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: ConsumerKind}
		h.Labels[ClusterLabel] = "c1"
		h.Status.Provisioning.State = metal3v1.StateProvisioned
	}
	hosts := []metal3v1.BareMetalHost{bmh("a-used", "a", mine), bmh("a1", "a"), bmh("b1", "b"), bmh("b2", "b"), bmh("c-used", "c", mine), bmh("c1", "c")}
	for range 20 {
		c, err := Candidates(hosts, &metav1.LabelSelector{}, "", "c1")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c[0].Name).To(BeElementOf("b1", "b2"), "the domain without hosts of this cluster comes first")
		c, err = Candidates(hosts, &metav1.LabelSelector{}, "c", "c1")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c[0].Name).To(Equal("c1"), "the Machine's failure domain is preferred")
		// Another cluster's hosts do not count for spreading.
		c, err = Candidates(hosts, &metav1.LabelSelector{}, "", "c2")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c).To(HaveLen(4))
	}
	// Random among equals: both b hosts come first at some point.
	first := map[string]bool{}
	for range 100 {
		c, _ := Candidates(hosts, &metav1.LabelSelector{}, "", "c1")
		first[c[0].Name] = true
	}
	g.Expect(first).To(HaveLen(2))
}

// A claim remembered by this replica hides the host only while the cache still shows the version read
// before the claim; once the cache has moved on (claimed, or even released again) it is forgotten.
func TestOverlayRecentOnlyWhileTheCacheIsStale(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{recent: map[client.ObjectKey]recentClaim{{Namespace: "ns", Name: "h"}: {cluster: "c1", readVersion: "1", at: time.Now()}}}
	stale := []metal3v1.BareMetalHost{bmh("h", "a")}
	r.overlayRecent(stale)
	g.Expect(stale[0].Spec.ConsumerRef).NotTo(BeNil())
	g.Expect(Available(&stale[0])).To(BeFalse())

	released := []metal3v1.BareMetalHost{bmh("h", "a", func(h *metal3v1.BareMetalHost) { h.ResourceVersion = "7" })}
	r.overlayRecent(released)
	g.Expect(Available(&released[0])).To(BeTrue())
	g.Expect(r.recent).To(BeEmpty())
}

func TestReleasedAndAddresses(t *testing.T) {
	g := NewWithT(t)
	for st, want := range map[metal3v1.ProvisioningState]bool{
		metal3v1.StateAvailable: true, metal3v1.StateReady: true, metal3v1.StateNone: true,
		metal3v1.StateProvisioned: false, metal3v1.StateProvisioning: false, metal3v1.StateDeprovisioning: false,
	} {
		h := bmh("h", "a", func(h *metal3v1.BareMetalHost) { h.Status.Provisioning.State = st })
		g.Expect(Released(&h)).To(Equal(want), "state %q", st)
	}
	reregistering := bmh("h", "a", func(h *metal3v1.BareMetalHost) {
		h.Status.Provisioning.State = metal3v1.StateRegistering
		h.Status.Provisioning.Image = metal3v1.Image{URL: "http://i/x.iso"}
	})
	g.Expect(Released(&reregistering)).To(BeFalse(), "a deployed image is still recorded")
	h := bmh("h", "a", func(h *metal3v1.BareMetalHost) {
		h.Status.HardwareDetails = &metal3v1.HardwareDetails{Hostname: "node-1", NIC: []metal3v1.NIC{
			{Name: "eth0", IP: "10.0.0.5"}, {Name: "eth1", IP: "203.0.113.9"}, {Name: "eth2", IP: "fd00::5"}, {Name: "eth3"}}}
	})
	g.Expect(Addresses(&h)).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"}, {Type: clusterv1.MachineExternalIP, Address: "203.0.113.9"},
		{Type: clusterv1.MachineInternalIP, Address: "fd00::5"}, {Type: clusterv1.MachineHostName, Address: "node-1"}}))
	g.Expect(ProviderID("ns", "h")).To(Equal("yonder-metal://ns/h"))
}
