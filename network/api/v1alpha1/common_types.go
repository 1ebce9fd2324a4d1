package v1alpha1

// Protocol is how packets travel between two nodes.
// +kubebuilder:validation:Enum=WireGuard;VXLAN;GENEVE;IPIP;None;Auto
type Protocol string

const (
	// ProtocolWireGuard encrypts with WireGuard (kernel module or embedded wireguard-go).
	ProtocolWireGuard Protocol = "WireGuard"
	// ProtocolVXLAN encapsulates in VXLAN (UDP), unencrypted.
	ProtocolVXLAN Protocol = "VXLAN"
	// ProtocolGENEVE encapsulates in GENEVE (UDP), unencrypted; daemons without GENEVE use VXLAN.
	ProtocolGENEVE Protocol = "GENEVE"
	// ProtocolIPIP encapsulates IP in IP, unencrypted; daemons without IPIP use VXLAN.
	ProtocolIPIP Protocol = "IPIP"
	// ProtocolNone routes natively over the underlay (the underlay must route pod CIDRs to nodes).
	ProtocolNone Protocol = "None"
	// ProtocolAuto lets the controller choose; between sites, encryption wins (see docs/network.md).
	ProtocolAuto Protocol = "Auto"
)

// EndpointType says which of a node's addresses peers dial.
// +kubebuilder:validation:Enum=External;Internal
type EndpointType string

const (
	// EndpointExternal is an address reachable from other sites (public or NATed).
	EndpointExternal EndpointType = "External"
	// EndpointInternal is an address reachable inside the site or over a private interconnect.
	EndpointInternal EndpointType = "Internal"
)

// Reachability says whether peers at other Sites can open a connection to a node (send it the first
// packet), or whether it sits behind a NAT or stateful firewall that drops unsolicited traffic, so it must
// initiate every connection itself.
type Reachability string

const (
	// ReachabilityAuto uses what each node's daemon detects (Site.spec.reachability only).
	ReachabilityAuto Reachability = "Auto"
	// ReachabilityReachable means peers at other Sites can dial the node at its External endpoint.
	ReachabilityReachable Reachability = "Reachable"
	// ReachabilityBehindNAT means the node accepts nothing unsolicited; it dials its peers, and peers learn its
	// endpoint from its WireGuard handshake.
	ReachabilityBehindNAT Reachability = "BehindNAT"
)

// Endpoint is one address at which a node's daemon can be reached.
type Endpoint struct {
	// address is an IPv4 or IPv6 address (no port; ports are in the peer's ports).
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`
	// type says from where this address is reachable.
	// +required
	Type EndpointType `json:"type"`
}

// Ports are the UDP ports a node's dataplane listens on.
type Ports struct {
	// wireGuard is the WireGuard listen port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	WireGuard int32 `json:"wireGuard,omitempty"`
	// vxlan is the VXLAN destination port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	VXLAN int32 `json:"vxlan,omitempty"`
	// geneve is the GENEVE destination port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	GENEVE int32 `json:"geneve,omitempty"`
	// probe is the port of the BFD-style UDP health probes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Probe int32 `json:"probe,omitempty"`
}

// Well-known labels and names.
const (
	// SiteLabel is set by the controller on every Node it assigned to a Site, and on PeerSlices.
	SiteLabel = "network.yonder.dev/site"
	// SliceRoleLabel is set on PeerSlices so daemons can watch only gateway slices of remote sites.
	SliceRoleLabel = "network.yonder.dev/slice-role"
	// ManagedByLabel marks objects written by the controller.
	ManagedByLabel = "network.yonder.dev/managed-by"
	// ControllerName is the value of ManagedByLabel and the controller's field owner.
	ControllerName = "yonder-net-controller"
)

// Condition types and reasons shared by several kinds.
const (
	// ReadyCondition summarises an object.
	ReadyCondition = "Ready"
	// ReadyReason is the reason of a True Ready condition.
	ReadyReason = "Ready"
)
