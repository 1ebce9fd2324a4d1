package hostpool

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

func h(name, fd string, labels map[string]string, mut ...func(*infrav1.YonderSSHHost)) *infrav1.YonderSSHHost {
	own := map[string]string{}
	for k, v := range labels {
		own[k] = v
	}
	x := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: own}, Spec: infrav1.YonderSSHHostSpec{FailureDomain: fd, SSHEndpoint: infrav1.SSHEndpoint{HostKey: "k"}}}
	for _, m := range mut {
		m(x)
	}
	return x
}

func names(hs []*infrav1.YonderSSHHost) []string {
	out := []string{}
	for _, x := range hs {
		out = append(out, x.Name)
	}
	return out
}

// Hosts without a pinned key, released without cleanup or claimed are never candidates; unreachable
// hosts come last, spreading puts the failure domain with the fewest hosts of the Cluster first, and the
// Machine's failure domain is a requirement.
func TestCandidates(t *testing.T) {
	edge := map[string]string{"pool": "edge"}
	claimedBy := func(cluster string) func(*infrav1.YonderSSHHost) {
		return func(x *infrav1.YonderSSHHost) {
			Pool{}.SetConsumer(x, claim.Consumer{Name: "m", ID: "u", Cluster: cluster})
		}
	}
	unreachable := func(x *infrav1.YonderSSHHost) {
		x.Status.Conditions = []metav1.Condition{{Type: infrav1.YonderSSHHostReachableCondition, Status: metav1.ConditionFalse, Reason: infrav1.SSHUnreachableReason}}
	}
	inventory := []*infrav1.YonderSSHHost{
		h("a1", "a", edge, claimedBy("c1")),
		h("a2", "a", edge),
		h("b1", "b", edge),
		h("b2", "b", edge, unreachable),
		h("c1", "c", map[string]string{"pool": "core"}),
		h("nokey", "b", edge, func(x *infrav1.YonderSSHHost) { x.Spec.HostKey = "" }),
		h("dirty", "b", edge, func(x *infrav1.YonderSSHHost) { x.Annotations = map[string]string{infrav1.NeedsCleanupAnnotation: "m"} }),
		h("halfreleased", "b", map[string]string{"pool": "edge", infrav1.ConsumerUIDLabel: "old"}),
	}
	c := claim.Consumer{Name: "m2", ID: "u2", Cluster: "c1"}
	for name, tc := range map[string]struct {
		sel  *metav1.LabelSelector
		fd   string
		want []string
	}{
		// Domain b holds none of c1's hosts, so it comes first; the unreachable host comes last.
		"spread and reachable first": {&metav1.LabelSelector{MatchLabels: edge}, "", []string{"b1", "a2", "b2"}},
		"failure domain":             {&metav1.LabelSelector{MatchLabels: edge}, "a", []string{"a2"}},
		"expressions":                {&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"core"}}}}, "", []string{"c1"}},
		"nothing":                    {&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}, "", []string{}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := claim.Candidates(Pool{}, inventory, tc.sel, tc.fd, c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(got)).To(Equal(tc.want))
		})
	}
	_, err := claim.Candidates(Pool{}, inventory, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}, "", c)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("failed to parse hostSelector")))
}

// A claim is recorded in spec.consumerRef and the consumer-uid label, and read back from either; a
// label left without a consumerRef still holds the host under that identity.
func TestConsumerRoundTrip(t *testing.T) {
	g := NewWithT(t)
	x := h("x", "a", nil)
	Pool{}.SetConsumer(x, claim.Consumer{Name: "m", ID: "id-1", Cluster: "c1"})
	g.Expect(x.Spec.ConsumerRef).To(Equal(&infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: ConsumerKind, Name: "m", UID: "id-1", ClusterName: "c1"}))
	g.Expect(x.Labels).To(HaveKeyWithValue(infrav1.ConsumerUIDLabel, "id-1"))
	g.Expect(Pool{}.ConsumerOf(x)).To(Equal(&claim.Consumer{Name: "m", ID: "id-1", Cluster: "c1"}))
	g.Expect(Pool{}.ConsumerOf(x).Owns("m", "id-1")).To(BeTrue())
	g.Expect(Pool{}.ConsumerOf(x).Owns("other", "id-1")).To(BeFalse(), "another machine carrying the same identity does not own it")
	x.Spec.ConsumerRef = nil
	g.Expect(Pool{}.ConsumerOf(x)).To(Equal(&claim.Consumer{ID: "id-1"}))
	g.Expect(Pool{}.Available(x)).To(BeFalse())
	Pool{}.ClearConsumer(x)
	g.Expect(Pool{}.ConsumerOf(x)).To(BeNil())
	g.Expect(Pool{}.Available(x)).To(BeTrue())
}

// The claim reasons this provider's API names are the values the shared claim reconciler writes.
func TestAPIReasonsAreTheClaimReasons(t *testing.T) {
	g := NewWithT(t)
	g.Expect(infrav1.YonderSSHMachineHostClaimedReason).To(Equal(claim.ClaimedReason))
	g.Expect(infrav1.YonderSSHMachineNoHostAvailableReason).To(Equal(claim.NoHostAvailableReason))
	g.Expect(infrav1.YonderSSHMachineInvalidHostSelectorReason).To(Equal(claim.InvalidHostSelectorReason))
}
