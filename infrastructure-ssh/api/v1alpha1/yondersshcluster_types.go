package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// YonderSSHClusterSpec is the infrastructure of a Cluster whose Machines run on SSH hosts.
type YonderSSHClusterSpec struct {
	// controlPlaneEndpoint is passed through to the Cluster as is (the control plane exists already, or
	// the control plane provider sets the endpoint itself, in which case leave this empty).
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// hostSelector chooses the YonderSSHHosts of the namespace whose failure domains this Cluster
	// reports. Empty: every host of the namespace.
	// +optional
	HostSelector HostSelector `json:"hostSelector,omitempty"`
}

// YonderSSHClusterInitializationStatus is the CAPI v1beta2 initialization contract.
type YonderSSHClusterInitializationStatus struct {
	// provisioned is true once the cluster infrastructure is ready (there is nothing to create).
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// YonderSSHClusterStatus is the observed state.
type YonderSSHClusterStatus struct {
	// initialization reports provisioning to Cluster API.
	// +optional
	Initialization YonderSSHClusterInitializationStatus `json:"initialization,omitempty,omitzero"`
	// failureDomains are the distinct spec.failureDomain values of the selected hosts.
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
// +kubebuilder:resource:path=yondersshclusters,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderSSHCluster is the infrastructure of a Cluster whose workers are YonderSSHHosts.
type YonderSSHCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the cluster.
	// +optional
	Spec YonderSSHClusterSpec `json:"spec,omitempty"`
	// status of the cluster.
	// +optional
	Status YonderSSHClusterStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (c *YonderSSHCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions.
func (c *YonderSSHCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// InventoryFailureDomains returns spec.hostSelector, the hosts whose failure domains the cluster
// offers, and the failure domains the spec names besides theirs.
func (c *YonderSSHCluster) InventoryFailureDomains() (*metav1.LabelSelector, []string) {
	return c.Spec.HostSelector.LabelSelector(), nil
}

// SetProvisioned records the failure domains and that the cluster infrastructure is provisioned.
func (c *YonderSSHCluster) SetProvisioned(failureDomains []clusterv1.FailureDomain) {
	c.Status.FailureDomains = failureDomains
	provisioned := true
	c.Status.Initialization.Provisioned = &provisioned
}

// +kubebuilder:object:root=true

// YonderSSHClusterList is a list of YonderSSHClusters.
type YonderSSHClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the clusters.
	Items []YonderSSHCluster `json:"items"`
}

// YonderSSHClusterTemplateResource is the template's cluster.
type YonderSSHClusterTemplateResource struct {
	// metadata is copied to the cluster.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the cluster.
	// +required
	Spec YonderSSHClusterSpec `json:"spec"`
}

// YonderSSHClusterTemplateSpec is the template's spec.
type YonderSSHClusterTemplateSpec struct {
	// template of the cluster.
	// +required
	Template YonderSSHClusterTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondersshclustertemplates,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderSSHClusterTemplate is the template ClusterClass clones YonderSSHClusters from.
type YonderSSHClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec YonderSSHClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderSSHClusterTemplateList is a list of YonderSSHClusterTemplates.
type YonderSSHClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the templates.
	Items []YonderSSHClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderSSHCluster{}, &YonderSSHClusterList{}, &YonderSSHClusterTemplate{}, &YonderSSHClusterTemplateList{})
}
