package gateway

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func TestHealth(t *testing.T) {
	healthy := Candidate{NodeReady: true, DataplaneReady: true, HasPublicKey: true, NeedsPublicKey: true}
	cases := []struct {
		name   string
		mutate func(*Candidate)
		want   string
	}{
		{name: "healthy", mutate: func(*Candidate) {}},
		{name: "node not ready", mutate: func(c *Candidate) { c.NodeReady = false }, want: netv1.GatewayNodeNotReady},
		{name: "cordoned", mutate: func(c *Candidate) { c.Unschedulable = true }, want: netv1.GatewayUnschedulable},
		{name: "deleting wins over everything", mutate: func(c *Candidate) { c.Deleting, c.NodeReady = true, false }, want: netv1.GatewayDeleting},
		{name: "daemon missing", mutate: func(c *Candidate) { c.DataplaneReady = false }, want: netv1.GatewayDataplaneNotReady},
		{name: "daemon says gateway broken", mutate: func(c *Candidate) { c.GatewayReady = ptr.To(false) }, want: netv1.GatewayDataplaneNotReady},
		{name: "no key but WireGuard needed", mutate: func(c *Candidate) { c.HasPublicKey = false }, want: netv1.GatewayNoPublicKey},
		{name: "no key, VXLAN only", mutate: func(c *Candidate) { c.HasPublicKey, c.NeedsPublicKey = false, false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := healthy
			tc.mutate(&c)
			active, reason := Health(c)
			g.Expect(reason).To(Equal(tc.want))
			g.Expect(active).To(Equal(tc.want == ""))
		})
	}
}

// Flows spread evenly over all gateways, and removing one gateway moves only the flows it carried.
func TestPickSpreadsAndMovesOnlyLostFlows(t *testing.T) {
	g := NewWithT(t)
	gws := []string{"gw-a", "gw-b", "gw-c", "gw-d"}
	const flows = 20000
	before := map[int]string{}
	count := map[string]int{}
	for i := range flows {
		p := Pick(fmt.Appendf(nil, "10.1.%d.%d:%d", i%250, i/250, 40000+i), gws)
		before[i] = p
		count[p]++
	}
	for _, gw := range gws {
		g.Expect(count[gw]).To(BeNumerically("~", flows/len(gws), flows/len(gws)/10), "gateway %s carries %d flows", gw, count[gw])
	}
	remaining := []string{"gw-a", "gw-c", "gw-d"}
	for i := range flows {
		p := Pick(fmt.Appendf(nil, "10.1.%d.%d:%d", i%250, i/250, 40000+i), remaining)
		if before[i] != "gw-b" {
			g.Expect(p).To(Equal(before[i]), "flow %d moved although its gateway stayed", i)
		}
	}
	g.Expect(Pick([]byte("x"), nil)).To(BeEmpty())
}
