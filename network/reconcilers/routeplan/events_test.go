package routeplan

import (
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// What an election changed, as the Events and the counters report it: a failover needs a gateway that
// stopped and one still active; a gateway that left the pool stopped with reason NotSelected.
func TestDiffGateways(t *testing.T) {
	gw := func(node string, active bool, reason string) netv1.GatewayStatus {
		return netv1.GatewayStatus{Node: node, Active: active, Reason: reason}
	}
	for _, tc := range []struct {
		name          string
		before, after []netv1.GatewayStatus
		want          gatewayChanges
		failover      bool
	}{
		{name: "first election", after: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", true, "")},
			want: gatewayChanges{elected: []string{"g1", "g2"}, active: []string{"g1", "g2"}}},
		{name: "nothing changed", before: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", false, netv1.GatewayNodeNotReady)},
			after: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", false, netv1.GatewayNodeNotReady)},
			want:  gatewayChanges{active: []string{"g1"}}},
		{name: "failover", before: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", true, "")},
			after: []netv1.GatewayStatus{gw("g1", false, netv1.GatewayNodeNotReady), gw("g2", true, "")},
			want:  gatewayChanges{stopped: []stoppedGateway{{"g1", netv1.GatewayNodeNotReady}}, active: []string{"g2"}}, failover: true},
		{name: "failover to a new gateway", before: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", false, netv1.GatewayDataplaneNotReady)},
			after: []netv1.GatewayStatus{gw("g1", false, netv1.GatewayUnschedulable), gw("g2", true, "")},
			want:  gatewayChanges{elected: []string{"g2"}, stopped: []stoppedGateway{{"g1", netv1.GatewayUnschedulable}}, active: []string{"g2"}}, failover: true},
		{name: "left the pool", before: []netv1.GatewayStatus{gw("g1", true, ""), gw("g2", true, "")},
			after: []netv1.GatewayStatus{gw("g2", true, "")},
			want:  gatewayChanges{stopped: []stoppedGateway{{"g1", notSelectedReason}}, active: []string{"g2"}}, failover: true},
		{name: "last gateway lost", before: []netv1.GatewayStatus{gw("g1", true, "")},
			after: []netv1.GatewayStatus{gw("g1", false, netv1.GatewayDeleting)},
			want:  gatewayChanges{stopped: []stoppedGateway{{"g1", netv1.GatewayDeleting}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := diffGateways(tc.before, tc.after)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(got.failover()).To(Equal(tc.failover))
		})
	}
}
