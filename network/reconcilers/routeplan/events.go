package routeplan

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// stoppedGateway is an active gateway that stopped carrying traffic, and why (a status.gateways[].reason,
// or notSelectedReason).
type stoppedGateway struct{ node, reason string }

// gatewayChanges are the changes of one GatewayPool's active gateways between two published statuses.
type gatewayChanges struct {
	elected []string         // started to carry traffic (the first election too)
	stopped []stoppedGateway // stopped carrying traffic
	active  []string         // carry traffic now
}

// failover reports whether traffic moved: gateways stopped while others stayed active. With no gateway left
// there is nowhere to fail over to: the pool's Ready condition turning False records that outage.
func (c gatewayChanges) failover() bool { return len(c.stopped) > 0 && len(c.active) > 0 }

// diffGateways compares the gateways of a pool's status before and after a write.
func diffGateways(before, after []netv1.GatewayStatus) gatewayChanges {
	wasActive := map[string]bool{}
	for _, g := range before {
		wasActive[g.Node] = g.Active
	}
	var c gatewayChanges
	listed := map[string]bool{}
	for _, g := range after {
		listed[g.Node] = true
		if g.Active {
			c.active = append(c.active, g.Node)
		}
		switch {
		case g.Active && !wasActive[g.Node]:
			c.elected = append(c.elected, g.Node)
		case !g.Active && wasActive[g.Node]:
			c.stopped = append(c.stopped, stoppedGateway{node: g.Node, reason: reasonOr(g.Reason, unknownReason)})
		}
	}
	for _, g := range before {
		if !listed[g.Node] && g.Active {
			c.stopped = append(c.stopped, stoppedGateway{node: g.Node, reason: notSelectedReason})
		}
	}
	return c
}

// recordGatewayEvents records the elections of one GatewayPool as Events on it and counts them per Site:
// which candidates started and stopped carrying traffic, and a failover when both happened in one pass
// (the operator's question after an outage: where did the traffic go, and why).
func recordGatewayEvents(rec record.EventRecorder, pool *netv1.GatewayPool, before, after []netv1.GatewayStatus) {
	c := diffGateways(before, after)
	for _, n := range c.elected {
		rec.Eventf(pool, corev1.EventTypeNormal, netv1.GatewayActivatedEvent, "Gateway %s carries traffic", n)
	}
	var from []string
	for _, s := range c.stopped {
		from = append(from, s.node+" ("+s.reason+")")
		rec.Eventf(pool, corev1.EventTypeWarning, netv1.GatewayDeactivatedEvent, "Gateway %s stopped carrying traffic: %s", s.node, describeStop(s.reason))
	}
	if c.failover() {
		rec.Eventf(pool, corev1.EventTypeWarning, netv1.GatewayFailoverEvent, "Traffic failed over from %s to %s",
			strings.Join(from, ", "), strings.Join(c.active, ", "))
	}
	countGatewayChanges(pool.Spec.Site, c)
}

// describeStop says why a gateway stopped in words where the reason alone would puzzle an operator.
func describeStop(reason string) string {
	if reason == notSelectedReason {
		return "the pool no longer selects it"
	}
	return reason
}

func reasonOr(reason, fallback string) string {
	if reason == "" {
		return fallback
	}
	return reason
}
