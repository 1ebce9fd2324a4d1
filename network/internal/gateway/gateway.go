// Package gateway decides which gateways carry traffic and how flows spread over them. All healthy
// gateways are active (no active/standby pair: a single-gateway bottleneck and a failover election are
// exactly what we avoid); flows are spread by rendezvous hashing, so losing one gateway moves only the
// flows it carried and every node computes the same choice without talking to the others.
package gateway

import (
	"hash/fnv"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Candidate is what the health decision looks at.
type Candidate struct {
	// NodeReady is the Node's Ready condition.
	NodeReady bool
	// Unschedulable is Node.spec.unschedulable: a cordoned gateway drains before maintenance.
	Unschedulable bool
	// Deleting is true when the Node has a deletion timestamp.
	Deleting bool
	// DataplaneReady is the NodeNetwork's Ready condition (false when the daemon published nothing).
	DataplaneReady bool
	// GatewayReady is the NodeNetwork's GatewayReady condition; nil when the daemon does not report it.
	GatewayReady *bool
	// HasPublicKey is true when the daemon published a WireGuard key.
	HasPublicKey bool
	// NeedsPublicKey is true when a link this gateway carries uses WireGuard.
	NeedsPublicKey bool
}

// Health returns whether a candidate is active and, if not, the reason (netv1.Gateway* constants).
// The order of the checks is the order an operator fixes things in.
func Health(c Candidate) (bool, string) {
	switch {
	case c.Deleting:
		return false, netv1.GatewayDeleting
	case c.Unschedulable:
		return false, netv1.GatewayUnschedulable
	case !c.NodeReady:
		return false, netv1.GatewayNodeNotReady
	case !c.DataplaneReady, c.GatewayReady != nil && !*c.GatewayReady:
		return false, netv1.GatewayDataplaneNotReady
	case c.NeedsPublicKey && !c.HasPublicKey:
		return false, netv1.GatewayNoPublicKey
	}
	return true, ""
}

// Pick returns the gateway (from a sorted list of active gateways) that carries a flow, by rendezvous
// (highest random weight) hashing of the flow key with each gateway's name. The dataplane uses the same
// function, so the controller, tests and every node agree; removing a gateway moves only its own flows.
func Pick(flowKey []byte, gateways []string) string {
	best, bestScore := "", uint64(0)
	for _, g := range gateways {
		h := fnv.New64a()
		_, _ = h.Write(flowKey)
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(g))
		// fnv's low bits mix poorly for similar inputs; a final avalanche (splitmix64) evens the spread.
		s := mix(h.Sum64())
		if best == "" || s > bestScore {
			best, bestScore = g, s
		}
	}
	return best
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
