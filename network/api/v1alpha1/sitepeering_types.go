package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology is how two peered Sites connect.
// +kubebuilder:validation:Enum=FullMesh;Gateway
type Topology string

const (
	// TopologyFullMesh means every node of one Site peers directly with every node of the other.
	TopologyFullMesh Topology = "FullMesh"
	// TopologyGateway means nodes send remote traffic to their Site's active gateways, which peer with the
	// remote Site's active gateways. A Site without gateway candidates acts as if each node were its own
	// gateway.
	TopologyGateway Topology = "Gateway"
)

// RelayPolicy says when a link goes through a relay Site.
// +kubebuilder:validation:Enum=Auto;Never;Always
type RelayPolicy string

const (
	// RelayAuto relays a link only when both of its ends are behind NAT (the default).
	RelayAuto RelayPolicy = "Auto"
	// RelayNever never relays: a link between two Sites behind NAT is down.
	RelayNever RelayPolicy = "Never"
	// RelayAlways relays every Gateway link of the peering, even where a direct or NAT-initiated path exists.
	RelayAlways RelayPolicy = "Always"
)

// LinkKind is how a link's tunnels are set up, as decided from the ends' reachability.
// +kubebuilder:validation:Enum=Direct;NATInitiated;Relayed
type LinkKind string

const (
	// LinkKindDirect means both ends accept connections; either end dials.
	LinkKindDirect LinkKind = "Direct"
	// LinkKindNATInitiated means one end is behind NAT. It dials (with persistent keepalive) and the reachable end
	// accepts it and learns its endpoint from the handshake (WireGuard only).
	LinkKindNATInitiated LinkKind = "NATInitiated"
	// LinkKindRelayed means both ends are behind NAT; traffic goes through the relay Site's gateways, which both
	// ends dial.
	LinkKindRelayed LinkKind = "Relayed"
)

// SitePeeringSpec connects Sites pairwise.
type SitePeeringSpec struct {
	// sites are the Sites to connect; every pair among them gets a link.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=256
	Sites []string `json:"sites"`
	// topology: FullMesh or Gateway. Defaults to Gateway.
	// +optional
	Topology Topology `json:"topology,omitempty"`
	// protocol overrides the Sites' interSite preferences for these links. Auto (default) applies the
	// "encryption wins" rule to the two Sites' preferences.
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
	// gatewayPools restricts which GatewayPools carry these links (names; empty means all pools of each
	// Site). Lets an Internal pool carry a private interconnect and an External pool the internet.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	GatewayPools []string `json:"gatewayPools,omitempty"`
	// endpointType is which node address FullMesh peers dial. Defaults to External (falling back to
	// Internal when a node publishes no external address).
	// +optional
	EndpointType EndpointType `json:"endpointType,omitempty"`
	// relay says when these links go through a relay Site (a Site peered with both ends with gateways that
	// may relay, see Site.spec.relay and GatewayPool.spec.relay): Auto (default) when both ends are behind
	// NAT, Never, or Always. Only Gateway-topology links are relayed.
	// +optional
	Relay RelayPolicy `json:"relay,omitempty"`
}

// LinkStatus describes one resolved link.
type LinkStatus struct {
	// sites are the two Sites, sorted.
	Sites []string `json:"sites"`
	// protocol is the resolved protocol.
	Protocol Protocol `json:"protocol"`
	// tunnelMTU is the MTU of the inner packets.
	TunnelMTU int32 `json:"tunnelMTU"`
	// up is false when a Gateway-mode link has no active gateway at one end, or no path (both ends behind
	// NAT and no relay).
	Up bool `json:"up"`
	// kind is Direct, NATInitiated or Relayed.
	// +optional
	Kind LinkKind `json:"kind,omitempty"`
	// behindNAT are the link's Sites whose gateways (or nodes, without gateways) carrying the link are
	// behind NAT: they dial, the other end accepts.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	BehindNAT []string `json:"behindNAT,omitempty"`
	// relay is the Site a Relayed link goes through.
	// +optional
	Relay string `json:"relay,omitempty"`
}

// SitePeeringStatus is what the controller observed about a SitePeering.
type SitePeeringStatus struct {
	// conditions: Ready (all Sites exist, all links up).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// links are the resolved links (up to 256).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Links []LinkStatus `json:"links,omitempty"`
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SitePeering reasons.
const (
	// SitePeeringSiteNotFoundReason: a Site in spec.sites does not exist.
	SitePeeringSiteNotFoundReason = "SiteNotFound"
	// SitePeeringLinkDownReason: a Gateway-mode link has no active gateway at one end.
	SitePeeringLinkDownReason = "LinkDown"
	// SitePeeringNoRelayReason: both ends of a link are behind NAT and no Site can relay it.
	SitePeeringNoRelayReason = "NoRelay"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// SitePeering says which Sites reach each other and how. Sites not peered do not exchange pod traffic.
type SitePeering struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired configuration.
	Spec SitePeeringSpec `json:"spec,omitempty"`
	// status is observed by the controller.
	Status SitePeeringStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SitePeeringList is a list of SitePeerings.
type SitePeeringList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the SitePeerings.
	Items []SitePeering `json:"items"`
}

// GetConditions returns the conditions.
func (p *SitePeering) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions.
func (p *SitePeering) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }
