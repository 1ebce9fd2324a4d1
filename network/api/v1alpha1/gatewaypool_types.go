package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayPoolSpec selects the gateway nodes of one Site.
type GatewayPoolSpec struct {
	// site is the name of the Site whose Nodes are candidates. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="site is immutable"
	Site string `json:"site"`
	// nodeSelector selects candidates among the Site's Nodes. Every healthy candidate is active; flows are
	// spread over all of them. Its keys must be in the node-restriction.kubernetes.io domain, which a
	// Node's own kubelet cannot set (CAPI copies such labels from Machines to Nodes).
	// +required
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// type says which address of a gateway remote peers dial: External (public/NATed endpoint) or
	// Internal (private interconnect). Defaults to External.
	// +optional
	Type EndpointType `json:"type,omitempty"`
	// routedCIDRs are networks at this Site outside Kubernetes (e.g. an on-prem LAN) that other Sites reach
	// through this pool's gateways.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	RoutedCIDRs []string `json:"routedCIDRs,omitempty"`
	// listenPorts the gateways listen on (so firewalls can be opened for exactly these). Unset ports use
	// the daemon's defaults (WireGuard 51820, VXLAN 4789, GENEVE 6081, probe from the Site).
	// +optional
	ListenPorts Ports `json:"listenPorts,omitempty"`
	// relay lets this pool's reachable gateways carry traffic between two Sites peered with this pool's
	// Site that are both behind NAT (Site.spec.relay marks every pool of a Site). The controller chooses
	// the relay Site of each such link; flows spread over its relay gateways and a failed one is left out
	// like any gateway.
	// +optional
	Relay bool `json:"relay,omitempty"`
}

// GatewayStatus is one candidate's state.
type GatewayStatus struct {
	// node is the Node's name.
	Node string `json:"node"`
	// active is true when the gateway carries traffic.
	Active bool `json:"active"`
	// reason says why an inactive candidate is not active (NodeNotReady, DataplaneNotReady,
	// Unschedulable, Deleting, NoPublicKey).
	// +optional
	Reason string `json:"reason,omitempty"`
}

// GatewayPoolStatus is what the controller observed about a GatewayPool.
type GatewayPoolStatus struct {
	// conditions: Ready (at least one active gateway).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// gateways are the candidates (up to 64, sorted by name).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Gateways []GatewayStatus `json:"gateways,omitempty"`
	// candidates is the number of Nodes the pool selects.
	// +optional
	Candidates int32 `json:"candidates,omitempty"`
	// active is the number of active gateways.
	// +optional
	Active int32 `json:"active,omitempty"`
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GatewayPool reasons.
const (
	// GatewayPoolNoActiveGatewayReason: no candidate is healthy.
	GatewayPoolNoActiveGatewayReason = "NoActiveGateway"
	// GatewayPoolSiteNotFoundReason: spec.site names no Site.
	GatewayPoolSiteNotFoundReason = "SiteNotFound"
)

// Reasons why a gateway candidate is inactive.
const (
	// GatewayNodeNotReady: the Node's Ready condition is not True.
	GatewayNodeNotReady = "NodeNotReady"
	// GatewayDataplaneNotReady: the daemon's NodeNetwork is missing or not Ready.
	GatewayDataplaneNotReady = "DataplaneNotReady"
	// GatewayUnschedulable: the Node is cordoned; gateways drain before maintenance.
	GatewayUnschedulable = "Unschedulable"
	// GatewayDeleting: the Node is being deleted.
	GatewayDeleting = "Deleting"
	// GatewayNoPublicKey: a WireGuard link needs the key the daemon has not published yet.
	GatewayNoPublicKey = "NoPublicKey"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=yonder-network
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Site",type=string,JSONPath=`.spec.site`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Relay",type=boolean,JSONPath=`.spec.relay`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Candidates",type=integer,JSONPath=`.status.candidates`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GatewayPool is a set of Nodes of one Site that carry traffic to and from other Sites.
type GatewayPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired configuration.
	Spec GatewayPoolSpec `json:"spec,omitempty"`
	// status is observed by the controller.
	Status GatewayPoolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GatewayPoolList is a list of GatewayPools.
type GatewayPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the GatewayPools.
	Items []GatewayPool `json:"items"`
}

// GetConditions returns the conditions.
func (p *GatewayPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions.
func (p *GatewayPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }
