package routeplan

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// recordGatewayEvents records the elections of one GatewayPool: which candidates started and stopped
// carrying traffic, and a failover when both happened in one pass (the operator's question after an
// outage: where did the traffic go, and why).
func recordGatewayEvents(rec record.EventRecorder, pool *netv1.GatewayPool, before, after []netv1.GatewayStatus) {
	wasActive := map[string]bool{}
	for _, g := range before {
		wasActive[g.Node] = g.Active
	}
	isActive := map[string]bool{}
	var active, deactivated []string
	for _, g := range after {
		isActive[g.Node] = g.Active
		if g.Active {
			active = append(active, g.Node)
		}
		switch {
		case g.Active && !wasActive[g.Node]:
			rec.Eventf(pool, corev1.EventTypeNormal, netv1.GatewayActivatedEvent, "Gateway %s carries traffic", g.Node)
		case !g.Active && wasActive[g.Node]:
			deactivated = append(deactivated, g.Node+" ("+reasonOr(g.Reason, "not a candidate")+")")
			rec.Eventf(pool, corev1.EventTypeWarning, netv1.GatewayDeactivatedEvent, "Gateway %s stopped carrying traffic: %s", g.Node, reasonOr(g.Reason, "unknown"))
		}
	}
	for _, g := range before {
		if _, still := isActive[g.Node]; !still && g.Active {
			deactivated = append(deactivated, g.Node+" (no longer selected)")
			rec.Eventf(pool, corev1.EventTypeWarning, netv1.GatewayDeactivatedEvent, "Gateway %s stopped carrying traffic: the pool no longer selects it", g.Node)
		}
	}
	// With no gateway left there is nowhere to fail over to: the pool's Ready condition turning False
	// records that outage.
	if len(deactivated) > 0 && len(active) > 0 {
		rec.Eventf(pool, corev1.EventTypeWarning, netv1.GatewayFailoverEvent, "Traffic failed over from %s to %s",
			strings.Join(deactivated, ", "), strings.Join(active, ", "))
	}
}

func reasonOr(reason, fallback string) string {
	if reason == "" {
		return fallback
	}
	return reason
}
