package hostpool

import (
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

func bmh(name, fd string, mod ...func(*metal3v1.BareMetalHost)) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "1",
		Labels: map[string]string{"pool": "p", infrav1.FailureDomainLabel: fd}, Annotations: map[string]string{}}}
	h.Status.Provisioning.State = metal3v1.StateAvailable
	for _, m := range mod {
		m(h)
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

// Only free, managed, ready hosts are claimed: CAPM3's rules.
func TestCandidatesSkipUnusableHosts(t *testing.T) {
	g := NewWithT(t)
	hosts := []*metal3v1.BareMetalHost{
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
	c, err := claim.Candidates(Pool{}, hosts, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}, "", claim.Consumer{ID: "u", Cluster: "c1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(c)).To(ConsistOf("ok", "ready"))
	// Another kind's claim is not ours: the host is unavailable and has no consumer of this provider.
	g.Expect(Pool{}.ConsumerOf(hosts[5])).To(BeNil())
}

// A claim written by SetConsumer reads back with ConsumerOf; ClearConsumer also withdraws what the
// host was handed.
func TestConsumerRoundTripAndClear(t *testing.T) {
	g := NewWithT(t)
	h := bmh("h", "a")
	Pool{}.SetConsumer(h, claim.Consumer{Name: "m", ID: "id-1", Cluster: "c1"})
	g.Expect(Pool{}.ConsumerOf(h)).To(Equal(&claim.Consumer{Name: "m", ID: "id-1", Cluster: "c1"}))
	g.Expect(h.Spec.ConsumerRef).To(Equal(&corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: ConsumerKind, Namespace: "ns", Name: "m", UID: "id-1"}))
	g.Expect(Pool{}.Available(h)).To(BeFalse())
	h.Spec.Image, h.Spec.Online, h.Spec.UserData = &metal3v1.Image{URL: "http://i"}, true, &corev1.SecretReference{Name: "d"}
	Pool{}.ClearConsumer(h)
	g.Expect(h.Spec.ConsumerRef).To(BeNil())
	g.Expect(h.Labels).NotTo(HaveKey(infrav1.ClusterLabel))
	g.Expect(h.Spec.Image).To(BeNil())
	g.Expect(h.Spec.UserData).To(BeNil())
	g.Expect(h.Spec.Online).To(BeFalse())
	g.Expect(Withdraw(h)).To(BeFalse(), "nothing left to withdraw")
}

// The Machine's failure domain is a requirement; without one, the domain holding the fewest hosts of the
// same Cluster comes first, and another Cluster's hosts do not count.
func TestCandidatesFailureDomainThenSpread(t *testing.T) {
	g := NewWithT(t)
	mine := func(h *metal3v1.BareMetalHost) {
		Pool{}.SetConsumer(h, claim.Consumer{Name: "x", ID: "x", Cluster: "c1"})
		h.Status.Provisioning.State = metal3v1.StateProvisioned
	}
	hosts := []*metal3v1.BareMetalHost{bmh("a-used", "a", mine), bmh("a1", "a"), bmh("b1", "b"), bmh("b2", "b"), bmh("c-used", "c", mine), bmh("c1", "c")}
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		c, err := claim.Candidates(Pool{}, hosts, &metav1.LabelSelector{}, "", claim.Consumer{ID: claimID(id), Cluster: "c1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names(c)[:2]).To(ConsistOf("b1", "b2"), "the domain without hosts of this cluster comes first")
		c, err = claim.Candidates(Pool{}, hosts, &metav1.LabelSelector{}, "c", claim.Consumer{ID: claimID(id), Cluster: "c1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names(c)).To(Equal([]string{"c1"}), "only the Machine's failure domain")
		c, err = claim.Candidates(Pool{}, hosts, &metav1.LabelSelector{}, "", claim.Consumer{ID: claimID(id), Cluster: "c2"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c).To(HaveLen(4))
	}
}

func claimID(s string) types.UID { return types.UID(s) }

// The claim reasons this provider's API names are the values the shared claim reconciler writes.
func TestAPIReasonsAreTheClaimReasons(t *testing.T) {
	g := NewWithT(t)
	g.Expect(infrav1.YonderMetalMachineHostClaimedReason).To(Equal(claim.ClaimedReason))
	g.Expect(infrav1.YonderMetalMachineNoHostAvailableReason).To(Equal(claim.NoHostAvailableReason))
	g.Expect(infrav1.YonderMetalMachineInvalidHostSelectorReason).To(Equal(claim.InvalidHostSelectorReason))
}
