package assign

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func TestAssign(t *testing.T) {
	sites := []netv1.Site{
		{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: netv1.SiteSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"loc": "edge"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "cloud"}, Spec: netv1.SiteSpec{NodeCIDRs: []string{"10.0.0.0/16"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "rack"}, Spec: netv1.SiteSpec{
			NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpExists}}},
			NodeCIDRs:    []string{"192.168.0.0/24"}}},
	}
	compiled, err := Compile(sites)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	cases := []struct {
		name     string
		labels   map[string]string
		ips      []string
		want     string
		conflict bool
	}{
		{name: "by label", labels: map[string]string{"loc": "edge"}, want: "edge"},
		{name: "by InternalIP", ips: []string{"10.0.3.4"}, want: "cloud"},
		{name: "by either", ips: []string{"192.168.0.9"}, want: "rack"},
		{name: "none", labels: map[string]string{"loc": "mars"}, ips: []string{"172.16.0.1"}, want: ""},
		{name: "several: first by name wins", labels: map[string]string{"loc": "edge", "rack": "r1"}, want: "edge", conflict: true},
		{name: "IPv4-mapped address", ips: []string{"::ffff:10.0.0.1"}, want: "cloud"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var ips []netip.Addr
			for _, s := range tc.ips {
				ips = append(ips, netip.MustParseAddr(s))
			}
			got, matched := Assign(compiled, tc.labels, ips)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(len(matched) > 1).To(Equal(tc.conflict))
		})
	}
}
