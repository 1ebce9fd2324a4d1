package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodCIDRPool is a range carved into per-node pod CIDR blocks.
type PodCIDRPool struct {
	// cidr is the pool, e.g. 10.244.0.0/16 or fd00:10:244::/56. Pools of all Sites must not overlap.
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=49
	CIDR string `json:"cidr"`
	// blockSize is the prefix length of each node's block (e.g. 24 for a /24 per node). Defaults to 24
	// for IPv4 and 64 for IPv6; it must be at least the pool's prefix length and at most 29 for IPv4
	// and 125 for IPv6 (a block also holds the node's tunnel address, the pod gateway and, for IPv4, the
	// WireGuard rotation and broadcast addresses, and must leave room for pods).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	BlockSize int32 `json:"blockSize,omitempty"`
}

// TunnelSpec says how this Site's nodes talk to each other and to other Sites.
type TunnelSpec struct {
	// intraSite is the protocol between two nodes of this Site. Auto means VXLAN (a site's own network is
	// trusted; VXLAN works across L3 subnets). Defaults to Auto.
	// +optional
	IntraSite Protocol `json:"intraSite,omitempty"`
	// interSite is this Site's preference for links to other Sites. When the two ends disagree or either
	// says Auto, the link uses WireGuard ("encryption wins"); a SitePeering may override. Defaults to Auto.
	// +optional
	InterSite Protocol `json:"interSite,omitempty"`
}

// HealthProbeSpec configures the BFD-style UDP probes between peers and to gateways.
type HealthProbeSpec struct {
	// intervalMilliseconds between probes. Defaults to 200.
	// +optional
	// +kubebuilder:validation:Minimum=20
	// +kubebuilder:validation:Maximum=60000
	IntervalMilliseconds int32 `json:"intervalMilliseconds,omitempty"`
	// failureThreshold is how many consecutive lost probes mark a peer down. Defaults to 3, so a peer's
	// failure is detected in 600 ms by default. Gateways in a node's groups are probed four times per
	// interval (never more often than every 20 ms), so a gateway's failure is detected in about a quarter
	// of that (150 ms by default); a gateway that answered again right after being marked down is held to
	// the configured pace for a while, so a false alarm cannot repeat at the fast one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// port is the UDP probe port. Defaults to 51822.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// SiteSpec describes one site: which nodes belong to it and how its network behaves.
type SiteSpec struct {
	// nodeSelector selects the Nodes of this Site by label. A Node matching several Sites joins the first
	// by name (reported in status.conflictingNodes). Its keys must be in the node-restriction.kubernetes.io
	// domain, which a Node's own kubelet cannot set (CAPI copies such labels from Machines to Nodes).
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// nodeCIDRs select Nodes by address: a Node whose InternalIP lies in one of them belongs to this Site.
	// They are also routed to this Site through its gateways, so host-network traffic crosses sites.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	NodeCIDRs []string `json:"nodeCIDRs,omitempty"`
	// podCIDRPools are carved into per-node pod CIDRs (at most one block per IP family per node). Empty
	// means the cluster (kube-controller-manager) allocates pod CIDRs itself.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	PodCIDRPools []PodCIDRPool `json:"podCIDRPools,omitempty"`
	// tunnel chooses the protocols inside this Site and towards other Sites.
	// +optional
	Tunnel TunnelSpec `json:"tunnel,omitempty"`
	// mtu is the underlay MTU of this Site's network. Tunnel MTUs are derived from the smaller MTU of
	// the two ends minus the protocol's overhead. Defaults to 1500.
	// +optional
	// +kubebuilder:validation:Minimum=1280
	// +kubebuilder:validation:Maximum=65535
	MTU int32 `json:"mtu,omitempty"`
	// healthProbe configures failure detection between peers of this Site and towards its gateways.
	// +optional
	HealthProbe HealthProbeSpec `json:"healthProbe,omitempty"`
	// nonMasqueradeCIDRs are destinations pods of this Site reach without SNAT, in addition to every pod
	// CIDR of this and peered Sites.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	NonMasqueradeCIDRs []string `json:"nonMasqueradeCIDRs,omitempty"`
	// reachability says whether peers at other Sites can dial this Site's nodes. Auto (default) uses what
	// each node's daemon detects (it asks peers at other Sites to send it an unsolicited probe);
	// Reachable and BehindNAT pin it for every node of the Site. A link with an end behind NAT is
	// NAT-initiated (that end dials) or, when both ends are behind NAT, relayed (see spec.relay).
	// +optional
	// +kubebuilder:validation:Enum=Auto;Reachable;BehindNAT
	Reachability Reachability `json:"reachability,omitempty"`
	// relay lets this Site's reachable gateways (every GatewayPool of the Site) carry traffic between two
	// Sites it is peered with that are both behind NAT. A relay decrypts and re-encrypts what it forwards,
	// as every gateway does: mark only Sites you trust with that traffic. GatewayPool.spec.relay marks a
	// single pool.
	// +optional
	Relay bool `json:"relay,omitempty"`
}

// SiteStatus is what the controller observed about a Site.
type SiteStatus struct {
	// conditions: Ready, PodCIDRsAvailable, GatewaysAvailable, MTUConsistent.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodes is the number of Nodes assigned to this Site.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// readyNodes is the number of those Nodes that are Ready with a Ready dataplane.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`
	// podCIDRs is how many per-node blocks are allocated and how many the pools hold.
	// +optional
	PodCIDRs PodCIDRUsage `json:"podCIDRs,omitempty"`
	// gateways is the number of gateway candidates of this Site's GatewayPools.
	// +optional
	Gateways int32 `json:"gateways,omitempty"`
	// activeGateways is the number of healthy, active gateways.
	// +optional
	ActiveGateways int32 `json:"activeGateways,omitempty"`
	// nodesBehindNAT is the number of the Site's Nodes that peers at other Sites cannot dial (detected by
	// their daemons or pinned by spec.reachability).
	// +optional
	NodesBehindNAT int32 `json:"nodesBehindNAT,omitempty"`
	// mtuMismatches are Nodes (up to 10, sorted) whose daemon reports an underlay MTU below spec.mtu.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	MTUMismatches []string `json:"mtuMismatches,omitempty"`
	// conflictingNodes are Nodes (up to 10) that match this Site and another one.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	ConflictingNodes []string `json:"conflictingNodes,omitempty"`
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PodCIDRUsage counts per-node blocks.
type PodCIDRUsage struct {
	// allocated blocks (including blocks of Nodes that moved to another Site).
	// +optional
	Allocated int64 `json:"allocated,omitempty"`
	// capacity is the number of blocks the pools hold (per family, the smallest).
	// +optional
	Capacity int64 `json:"capacity,omitempty"`
}

// Site condition types and reasons.
const (
	// SitePodCIDRsAvailableCondition is False when a Node waits for a pod CIDR the pools cannot give.
	SitePodCIDRsAvailableCondition = "PodCIDRsAvailable"
	// SitePoolExhaustedReason: every block of a pool is allocated.
	SitePoolExhaustedReason = "PoolExhausted"
	// SiteGatewaysAvailableCondition is False when a Gateway-mode peering of this Site has no active gateway here.
	SiteGatewaysAvailableCondition = "GatewaysAvailable"
	// SiteNoActiveGatewayReason: no gateway candidate of this Site is healthy.
	SiteNoActiveGatewayReason = "NoActiveGateway"
	// SiteMTUConsistentCondition is False when daemons report underlay MTUs below spec.mtu.
	SiteMTUConsistentCondition = "MTUConsistent"
	// SiteMTUMismatchReason: some Nodes report a smaller underlay MTU.
	SiteMTUMismatchReason = "MTUMismatch"
	// SiteNodeConflictReason: some Nodes match several Sites.
	SiteNodeConflictReason = "NodeConflict"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Gateways",type=integer,JSONPath=`.status.activeGateways`
// +kubebuilder:printcolumn:name="BehindNAT",type=integer,JSONPath=`.status.nodesBehindNAT`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Site is a group of Nodes that share a network: one cloud region, one rack, one edge location.
type Site struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired configuration.
	Spec SiteSpec `json:"spec,omitempty"`
	// status is observed by the controller.
	Status SiteStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SiteList is a list of Sites.
type SiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Sites.
	Items []Site `json:"items"`
}

// GetConditions returns the conditions (CAPI's conditions helpers use it).
func (s *Site) GetConditions() []metav1.Condition { return s.Status.Conditions }

// SetConditions sets the conditions.
func (s *Site) SetConditions(c []metav1.Condition) { s.Status.Conditions = c }
