package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNetworkSpec is what a node's daemon (yonder-net-node) publishes about itself. The daemon owns this
// object; the controller only reads it. Facts that must survive a restart (the public key) live in spec.
type NodeNetworkSpec struct {
	// publicKey is the node's WireGuard public key (base64, 32 bytes). The private key never leaves the node.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`
	PublicKey string `json:"publicKey,omitempty"`
	// wireGuardSlot says which of the node's two WireGuard slots carries publicKey. Slot 0 listens on
	// ports.wireGuard and uses the node's tunnel address (the first address of its first IPv4 pod CIDR) inside
	// WireGuard; slot 1 listens on ports.wireGuard + 1 and uses the next address. A key rotation brings up the
	// other slot with nextPublicKey and switches to it once peers have handshaken with it, so the old and new
	// keys never need the same allowed IP on a peer (make-before-break, no packet lost).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	WireGuardSlot int32 `json:"wireGuardSlot,omitempty"`
	// nextPublicKey is set while a key rotation is in progress: the WireGuard public key of the other slot
	// (1 - wireGuardSlot), already listening. Peers add it next to publicKey.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`
	NextPublicKey string `json:"nextPublicKey,omitempty"`
	// endpoints are the addresses peers may dial. Empty means the Node's status.addresses
	// (InternalIP → Internal, ExternalIP → External).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// ports the daemon listens on.
	// +optional
	Ports Ports `json:"ports,omitempty"`
	// protocols the dataplane supports on this node (detected at start: e.g. no GENEVE module).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Protocols []Protocol `json:"protocols,omitempty"`
	// underlayMTU is the MTU of the node's underlay interface; below the Site's mtu it is reported as a
	// mismatch.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	UnderlayMTU int32 `json:"underlayMTU,omitempty"`
	// reachability is what the daemon's reachability checks found: peers at other Sites answer its check
	// with the address they see it from and send an unsolicited probe to that address from another port;
	// it is Reachable when one arrives, BehindNAT when answered checks brought none. Unset until known.
	// +optional
	Reachability *NodeReachability `json:"reachability,omitempty"`
}

// NodeReachability is a node's detected reachability from other Sites.
type NodeReachability struct {
	// inbound is Reachable or BehindNAT.
	// +required
	// +kubebuilder:validation:Enum=Reachable;BehindNAT
	Inbound Reachability `json:"inbound"`
	// observedAddress is the address peers at other Sites see this node's traffic come from (behind NAT:
	// the NAT's public address). A node reachable there without an --external-endpoint publishes it as its
	// External endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	ObservedAddress string `json:"observedAddress,omitempty"`
}

// NodeNetworkStatus is the daemon's health.
type NodeNetworkStatus struct {
	// conditions: Ready (the dataplane is programmed and probes run) and, on gateway candidates,
	// GatewayReady (forwarding works; False takes the gateway out of the active set).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedPlanGeneration is the generation of the Site's RoutePlan the dataplane applied.
	// +optional
	ObservedPlanGeneration int64 `json:"observedPlanGeneration,omitempty"`
	// dataplane is what the daemon detected on the node and uses.
	// +optional
	Dataplane *NodeDataplaneStatus `json:"dataplane,omitempty"`
}

// WireGuardImplementation says what backs a node's WireGuard device.
// +kubebuilder:validation:Enum=kernel;userspace
type WireGuardImplementation string

const (
	// WireGuardKernel is the kernel's WireGuard module.
	WireGuardKernel WireGuardImplementation = "kernel"
	// WireGuardUserspace is wireguard-go embedded in the daemon (the kernel has no module).
	WireGuardUserspace WireGuardImplementation = "userspace"
)

// EBPFAttachMode says how the pod egress program is attached.
// +kubebuilder:validation:Enum=tcx;clsact
type EBPFAttachMode string

const (
	// EBPFAttachTCX is the tcx hook (kernel 6.6 and later).
	EBPFAttachTCX EBPFAttachMode = "tcx"
	// EBPFAttachClsact is a clsact qdisc with a direct-action filter.
	EBPFAttachClsact EBPFAttachMode = "clsact"
)

// NodeDataplaneStatus is what a node's daemon detected and uses, for operators comparing nodes (a node on
// userspace WireGuard forwards far less than one with the kernel module).
type NodeDataplaneStatus struct {
	// wireGuard is the implementation backing the WireGuard device.
	// +optional
	WireGuard WireGuardImplementation `json:"wireGuard,omitempty"`
	// kernelTunnelTypes are the tunnel link types the node's kernel can create (probed at start with
	// scratch links), sorted. The dataplane uses VXLAN and WireGuard (userspace when the kernel lacks it);
	// GENEVE and IPIP links fall back to VXLAN.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	KernelTunnelTypes []Protocol `json:"kernelTunnelTypes,omitempty"`
	// ebpfAttachMode is how the pod egress program is attached; empty until it is.
	// +optional
	EBPFAttachMode EBPFAttachMode `json:"ebpfAttachMode,omitempty"`
}

// NodeNetwork condition types.
const (
	// NodeNetworkGatewayReadyCondition is the daemon's own view of its gateway function.
	NodeNetworkGatewayReadyCondition = "GatewayReady"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="PublicKey",type=string,JSONPath=`.spec.publicKey`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// NodeNetwork is published by the node daemon, one per Node with the Node's name.
type NodeNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the daemon publishes.
	Spec NodeNetworkSpec `json:"spec,omitempty"`
	// status is the daemon's health.
	Status NodeNetworkStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// NodeNetworkList is a list of NodeNetworks.
type NodeNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the NodeNetworks.
	Items []NodeNetwork `json:"items"`
}
