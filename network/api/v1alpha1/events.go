package v1alpha1

// Event reasons the network controller records (kubectl get events --field-selector reason=…). Events go on
// the object they are about: Nodes for Site assignment and pod CIDRs, GatewayPools for gateway elections and
// failovers, Sites, GatewayPools and SitePeerings for every condition that changes.
const (
	// SiteAssignedEvent: a Node was assigned to a Site (or moved from one to another).
	SiteAssignedEvent = "SiteAssigned"
	// SiteUnassignedEvent: a Node no longer matches any Site and lost its Site label.
	SiteUnassignedEvent = "SiteUnassigned"
	// PodCIDRsAllocatedEvent: a Node got pod CIDRs from its Site's pools.
	PodCIDRsAllocatedEvent = "PodCIDRsAllocated"
	// PodCIDRPoolExhaustedEvent (Warning): a Node waits for a pod CIDR because its Site's pools are full.
	PodCIDRPoolExhaustedEvent = "PodCIDRPoolExhausted"
	// GatewayActivatedEvent: a candidate of a GatewayPool started to carry traffic.
	GatewayActivatedEvent = "GatewayActivated"
	// GatewayDeactivatedEvent (Warning): an active gateway stopped carrying traffic; the message says why.
	GatewayDeactivatedEvent = "GatewayDeactivated"
	// GatewayFailoverEvent (Warning): active gateways failed and the traffic moved to the ones still active.
	GatewayFailoverEvent = "GatewayFailover"
)
