package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SliceRole separates gateway candidates from other nodes so daemons of remote Sites in Gateway mode
// watch only the small gateway slices.
// +kubebuilder:validation:Enum=Nodes;Gateways
type SliceRole string

const (
	// SliceRoleNodes holds nodes that are not gateway candidates.
	SliceRoleNodes SliceRole = "Nodes"
	// SliceRoleGateways holds gateway candidates, active or not.
	SliceRoleGateways SliceRole = "Gateways"
)

// Peer is one node as its peers see it.
type Peer struct {
	// node is the Node's name.
	Node string `json:"node"`
	// podCIDRs are the Node's pod CIDRs (routed to it).
	// +optional
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// publicKey is the node's WireGuard public key (empty until its daemon publishes one).
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// wireGuardSlot is the node's NodeNetwork spec.wireGuardSlot.
	// +optional
	WireGuardSlot int32 `json:"wireGuardSlot,omitempty"`
	// nextPublicKey is the node's NodeNetwork spec.nextPublicKey (a key rotation in progress).
	// +optional
	NextPublicKey string `json:"nextPublicKey,omitempty"`
	// endpoints are the addresses to dial.
	// +optional
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// ports the node listens on (gateway pool ports win over the daemon's).
	// +optional
	Ports Ports `json:"ports,omitempty"`
	// protocols the node's dataplane supports (empty: not yet published; assume all).
	// +optional
	Protocols []Protocol `json:"protocols,omitempty"`
	// behindNAT is true when peers at other Sites cannot dial the node (detected by its daemon or pinned by
	// its Site): they accept it without an endpoint and learn its address from its handshake, and it dials
	// them with persistent keepalive.
	// +optional
	BehindNAT bool `json:"behindNAT,omitempty"`
	// gateway is set on gateway candidates.
	// +optional
	Gateway *PeerGateway `json:"gateway,omitempty"`
}

// PeerGateway is a gateway candidate's role.
type PeerGateway struct {
	// pools are the GatewayPools selecting this node, sorted.
	Pools []string `json:"pools"`
	// active is true when the gateway carries traffic.
	Active bool `json:"active"`
	// routedCIDRs are the pools' routed CIDRs this gateway forwards to, sorted.
	// +optional
	RoutedCIDRs []string `json:"routedCIDRs,omitempty"`
}

// PeerSliceSpec is a shard of one Site's peers. A node stays in its slice while it stays in the Site, so
// a change to one node rewrites one slice of at most --slice-size peers.
type PeerSliceSpec struct {
	// site the peers belong to.
	Site string `json:"site"`
	// role of the peers in this slice.
	Role SliceRole `json:"role"`
	// peers sorted by node.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	Peers []Peer `json:"peers,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:printcolumn:name="Site",type=string,JSONPath=`.spec.site`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// PeerSlice is written by the controller: a shard of a Site's peers, labelled with the Site and role.
type PeerSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the shard.
	Spec PeerSliceSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// PeerSliceList is a list of PeerSlices.
type PeerSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the PeerSlices.
	Items []PeerSlice `json:"items"`
}
