package claim

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

func h(name, fd string, labels map[string]string, mut ...func(*infrav1.YonderSSHHost)) infrav1.YonderSSHHost {
	x := infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: infrav1.YonderSSHHostSpec{FailureDomain: fd, SSHEndpoint: infrav1.SSHEndpoint{HostKey: "k"}}}
	for _, m := range mut {
		m(&x)
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

func TestCandidates(t *testing.T) {
	edge := map[string]string{"pool": "edge"}
	claimedBy := func(cluster string) func(*infrav1.YonderSSHHost) {
		return func(x *infrav1.YonderSSHHost) {
			x.Spec.ConsumerRef = &infrav1.ConsumerReference{Name: "m", UID: "u", ClusterName: cluster}
		}
	}
	unreachable := func(x *infrav1.YonderSSHHost) {
		x.Status.Conditions = []metav1.Condition{{Type: infrav1.HostReachableCondition, Status: metav1.ConditionFalse, Reason: "SSHUnreachable"}}
	}
	inventory := []infrav1.YonderSSHHost{
		h("a1", "a", edge, claimedBy("c1")),
		h("a2", "a", edge),
		h("b1", "b", edge),
		h("b2", "b", edge, unreachable),
		h("c1", "c", map[string]string{"pool": "core"}),
		h("nokey", "b", edge, func(x *infrav1.YonderSSHHost) { x.Spec.HostKey = "" }),
		h("dirty", "b", edge, func(x *infrav1.YonderSSHHost) { x.Annotations = map[string]string{infrav1.NeedsCleanupAnnotation: "m"} }),
	}
	c := Consumer{Name: "m2", UID: "u2", ClusterName: "c1"}
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
			got, err := Candidates(inventory, tc.sel, tc.fd, c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(got)).To(Equal(tc.want))
		})
	}
	_, err := Candidates(inventory, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}, "", c)
	NewWithT(t).Expect(err).To(HaveOccurred())
}
