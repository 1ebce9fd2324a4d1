package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LinkMode is how a Site's nodes reach a remote Site.
// +kubebuilder:validation:Enum=Direct;Gateway
type LinkMode string

const (
	// LinkModeDirect means each node peers with each remote node (remote pod CIDRs from the remote Site's
	// PeerSlices with role Nodes).
	LinkModeDirect LinkMode = "Direct"
	// LinkModeGateway means non-gateway nodes route the link's prefixes to localGateways; gateways (or every
	// node when localGateways is empty and selfGateway is true) peer with remoteGateways.
	LinkModeGateway LinkMode = "Gateway"
)

// IntraSitePlan is how nodes of the Site reach each other.
type IntraSitePlan struct {
	// protocol is the resolved protocol (never Auto).
	Protocol Protocol `json:"protocol"`
	// tunnelMTU is the MTU of the inner packets.
	TunnelMTU int32 `json:"tunnelMTU"`
}

// SiteLink is how the Site's nodes reach one remote Site.
type SiteLink struct {
	// site is the remote Site.
	Site string `json:"site"`
	// protocol is the resolved protocol (never Auto).
	Protocol Protocol `json:"protocol"`
	// mode is Direct or Gateway.
	Mode LinkMode `json:"mode"`
	// tunnelMTU is the MTU of the inner packets (smaller Site MTU minus worst-case overhead).
	TunnelMTU int32 `json:"tunnelMTU"`
	// endpointType is which address of the remote peers to dial.
	EndpointType EndpointType `json:"endpointType"`
	// prefixes are the remote Site's destinations (pod CIDR pools, pod CIDRs of nodes that moved there,
	// node CIDRs and routed CIDRs), sorted. Direct links route node pod CIDRs individually; these are for
	// gateways and for non-masquerading.
	// +optional
	Prefixes []string `json:"prefixes,omitempty"`
	// localGateways are this Site's active gateways carrying the link, sorted (Gateway mode). Flows are
	// spread over them by rendezvous hashing of the flow key (internal/gateway.Pick).
	// +optional
	LocalGateways []string `json:"localGateways,omitempty"`
	// selfGateway is true when this Site has no gateway candidates for the link, so every node talks to
	// the remote gateways itself.
	// +optional
	SelfGateway bool `json:"selfGateway,omitempty"`
	// remoteGateways are the remote Site's active gateways (peer details in its Gateways PeerSlices),
	// sorted. Empty with remoteSelfGateway false means the link is down.
	// +optional
	RemoteGateways []string `json:"remoteGateways,omitempty"`
	// remoteSelfGateway is true when the remote Site has no gateway candidates, so its nodes are dialled
	// directly (peer details in its Nodes PeerSlices).
	// +optional
	RemoteSelfGateway bool `json:"remoteSelfGateway,omitempty"`
	// up is false when a Gateway link has no active gateway at one end (or, relayed, at the relay).
	Up bool `json:"up"`
	// kind is Direct (both ends accept connections), NATInitiated (an end behind NAT dials; the peers'
	// behindNAT says which) or Relayed (both ends behind NAT: the link's gateways send to relay.gateways).
	// +optional
	Kind LinkKind `json:"kind,omitempty"`
	// relay is set on Relayed links: the relay Site and its gateways carrying the link, sorted. protocol,
	// endpointType and tunnelMTU are those of the path through the relay (its smallest MTU).
	// +optional
	Relay *LinkRelay `json:"relay,omitempty"`
}

// LinkRelay is the relay of a Relayed link.
type LinkRelay struct {
	// site is the relay Site (peered with both ends; its gateways route to both).
	Site string `json:"site"`
	// gateways are the relay Site's active, reachable relay gateways (peer details in its Gateways
	// PeerSlices), sorted. Flows spread over them like over any remote gateways.
	// +optional
	Gateways []string `json:"gateways,omitempty"`
}

// RoutePlanSpec is what every node of one Site applies. Per-node differences (its own pod CIDR, whether it
// is a gateway) come from the Node and the Site's PeerSlices, so one plan serves every node of the Site.
type RoutePlanSpec struct {
	// site is the Site this plan is for.
	Site string `json:"site"`
	// intraSite is how the Site's nodes reach each other (peers in the Site's PeerSlices).
	IntraSite IntraSitePlan `json:"intraSite"`
	// links to peered Sites, sorted by site.
	// +optional
	Links []SiteLink `json:"links,omitempty"`
	// nonMasqueradeCIDRs are destinations reached without SNAT, sorted.
	// +optional
	NonMasqueradeCIDRs []string `json:"nonMasqueradeCIDRs,omitempty"`
	// healthProbe settings (defaults applied).
	HealthProbe HealthProbeSpec `json:"healthProbe"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:printcolumn:name="Site",type=string,JSONPath=`.spec.site`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RoutePlan is written by the controller, one per Site (named after it); node daemons read it.
type RoutePlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the plan.
	Spec RoutePlanSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// RoutePlanList is a list of RoutePlans.
type RoutePlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the RoutePlans.
	Items []RoutePlan `json:"items"`
}
