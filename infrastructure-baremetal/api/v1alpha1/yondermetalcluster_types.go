package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// YonderMetalClusterSpec is the infrastructure of a Cluster whose Machines run on BareMetalHosts.
type YonderMetalClusterSpec struct {
	// controlPlaneEndpoint is passed through to the Cluster as is (the control plane exists already, or
	// the control plane provider sets the endpoint itself, in which case leave this empty).
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// hostSelector chooses the BareMetalHosts of the namespace whose failure domains (label
	// infrastructure.cluster.x-k8s.io/failure-domain) this Cluster reports. Empty: every host of the namespace.
	// +optional
	HostSelector HostSelector `json:"hostSelector,omitempty"`

	// failureDomains are reported in addition to those found on hosts (e.g. to offer a rack before its
	// hosts are registered). Hosts are workers, so none is offered to control plane machines.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	FailureDomains []string `json:"failureDomains,omitempty"`
}

// YonderMetalClusterInitializationStatus is the CAPI v1beta2 initialization contract.
type YonderMetalClusterInitializationStatus struct {
	// provisioned is true once the cluster infrastructure is ready (there is nothing to create).
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// YonderMetalClusterStatus is the observed state.
type YonderMetalClusterStatus struct {
	// initialization reports provisioning to Cluster API.
	// +optional
	Initialization YonderMetalClusterInitializationStatus `json:"initialization,omitempty,omitzero"`
	// failureDomains are spec.failureDomains and the distinct failure-domain labels of the selected hosts.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`
	// conditions: Ready, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalclusters,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalCluster is the infrastructure of a Cluster whose workers are BareMetalHosts.
type YonderMetalCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the cluster.
	// +optional
	Spec YonderMetalClusterSpec `json:"spec,omitempty"`
	// status of the cluster.
	// +optional
	Status YonderMetalClusterStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (c *YonderMetalCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions.
func (c *YonderMetalCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// InventoryFailureDomains returns spec.hostSelector, the hosts whose failure domains the cluster
// offers, and the failure domains the spec names besides theirs.
func (c *YonderMetalCluster) InventoryFailureDomains() (*metav1.LabelSelector, []string) {
	return c.Spec.HostSelector.LabelSelector(), c.Spec.FailureDomains
}

// SetProvisioned records the failure domains and that the cluster infrastructure is provisioned.
func (c *YonderMetalCluster) SetProvisioned(failureDomains []clusterv1.FailureDomain) {
	c.Status.FailureDomains = failureDomains
	provisioned := true
	c.Status.Initialization.Provisioned = &provisioned
}

// +kubebuilder:object:root=true

// YonderMetalClusterList is a list of YonderMetalClusters.
type YonderMetalClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the clusters.
	Items []YonderMetalCluster `json:"items"`
}

// YonderMetalClusterTemplateResource is the template's cluster.
type YonderMetalClusterTemplateResource struct {
	// metadata is copied to the cluster.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the cluster.
	// +required
	Spec YonderMetalClusterSpec `json:"spec"`
}

// YonderMetalClusterTemplateSpec is the template's spec.
type YonderMetalClusterTemplateSpec struct {
	// template of the cluster.
	// +required
	Template YonderMetalClusterTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalclustertemplates,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalClusterTemplate is the template ClusterClass clones YonderMetalClusters from.
type YonderMetalClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec YonderMetalClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderMetalClusterTemplateList is a list of YonderMetalClusterTemplates.
type YonderMetalClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the templates.
	Items []YonderMetalClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderMetalCluster{}, &YonderMetalClusterList{}, &YonderMetalClusterTemplate{}, &YonderMetalClusterTemplateList{})
}
