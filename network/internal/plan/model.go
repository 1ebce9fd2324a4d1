package plan

import (
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Node is what the plan needs of one Node and its NodeNetwork.
type Node struct {
	// Name of the Node.
	Name string
	// Version identifies the revision of the Node and its NodeNetwork ("" when unknown): two views with
	// the same non-empty Version are the same, which spares the incremental Planner comparing them.
	Version string
	// Site the Node is assigned to ("" for none: not in any plan).
	Site string
	// Labels of the Node (gateway pool selectors).
	Labels map[string]string
	// PodCIDRs from Node.spec.podCIDRs.
	PodCIDRs []string
	// Addresses from Node.status.addresses (used when the daemon publishes no endpoints).
	Addresses []netv1.Endpoint
	// Ready is the Node's Ready condition.
	Ready bool
	// Unschedulable is Node.spec.unschedulable.
	Unschedulable bool
	// Deleting is true when the Node has a deletion timestamp.
	Deleting bool
	// Network is the daemon's publication; nil until the daemon runs.
	Network *netv1.NodeNetworkSpec
	// DataplaneReady is the NodeNetwork's Ready condition.
	DataplaneReady bool
	// GatewayReady is the NodeNetwork's GatewayReady condition (nil: not reported).
	GatewayReady *bool
	// Conflicts are the Sites the Node matched besides its own.
	Conflicts []string
}

// Input is everything the plan depends on.
type Input struct {
	// Sites are all Sites.
	Sites []netv1.Site
	// Pools are all GatewayPools.
	Pools []netv1.GatewayPool
	// Peerings are all SitePeerings.
	Peerings []netv1.SitePeering
	// Nodes are all Nodes (those without a Site are only counted against pools).
	Nodes []Node
	// Previous are the PeerSlices currently published; they keep nodes in the slice they are in.
	Previous []netv1.PeerSlice
	// SliceSize is the maximum number of peers per slice (DefaultSliceSize when 0).
	SliceSize int
}

// Output is the desired state: objects to publish and status to report.
type Output struct {
	// Plans are the RoutePlans, sorted by name.
	Plans []netv1.RoutePlan
	// Slices are the PeerSlices, sorted by name.
	Slices []netv1.PeerSlice
	// Sites reports per Site.
	Sites map[string]*SiteReport
	// Pools reports per GatewayPool.
	Pools map[string]*PoolReport
	// Peerings reports per SitePeering.
	Peerings map[string]*PeeringReport
	// Fresh says which Plans and Slices (by PlanKey and SliceKey) a Planner computed anew; the others are
	// the objects of its previous Output, unchanged. Nil: every object is fresh (Compute, a full pass).
	Fresh map[string]bool
}

// PlanKey is a RoutePlan's key in Output.Fresh.
func PlanKey(name string) string { return "RoutePlan/" + name }

// SliceKey is a PeerSlice's key in Output.Fresh.
func SliceKey(name string) string { return "PeerSlice/" + name }

// IsFresh reports whether the object with key k was computed in this pass.
func (o *Output) IsFresh(k string) bool { return o.Fresh == nil || o.Fresh[k] }

// SiteReport is a Site's observed state.
type SiteReport struct {
	// Nodes and ReadyNodes count the Site's Nodes (ready: Node Ready and dataplane Ready).
	Nodes, ReadyNodes int32
	// Gateways and Active count gateway candidates and active gateways.
	Gateways, Active int32
	// Allocated and Capacity are the pod CIDR blocks of the binding family.
	Allocated, Capacity int64
	// WaitingForPodCIDR counts Nodes without a pod CIDR although the Site has pools.
	WaitingForPodCIDR int32
	// MTUMismatches are Nodes whose underlay MTU is below the Site's.
	MTUMismatches []string
	// Conflicts are Nodes that match several Sites.
	Conflicts []string
	// NodesBehindNAT counts Nodes that peers at other Sites cannot dial.
	NodesBehindNAT int32
	// GatewayLinksWithoutGate are remote Sites of Gateway links for which this Site has candidates but
	// none active.
	GatewayLinksWithoutGate []string
}

// PoolReport is a GatewayPool's observed state.
type PoolReport struct {
	// SiteFound is false when spec.site names no Site.
	SiteFound bool
	// Gateways are the candidates, sorted by name.
	Gateways []netv1.GatewayStatus
	// Active counts the active candidates.
	Active int32
}

// PeeringReport is a SitePeering's observed state.
type PeeringReport struct {
	// MissingSites are named Sites that do not exist.
	MissingSites []string
	// Links are the links this peering owns.
	Links []netv1.LinkStatus
	// NoPath are links ("a↔b") that need a relay and have none (or a FullMesh link between two Sites
	// behind NAT).
	NoPath []string
}
