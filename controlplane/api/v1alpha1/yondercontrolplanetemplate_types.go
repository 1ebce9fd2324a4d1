package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// YonderControlPlaneTemplateResource is what a ClusterClass stamps out.
type YonderControlPlaneTemplateResource struct {
	// metadata is copied to the generated YonderControlPlane.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the generated YonderControlPlane.
	// +optional
	Spec YonderControlPlaneSpec `json:"spec,omitempty,omitzero"`
}

// YonderControlPlaneTemplateSpec holds the template.
type YonderControlPlaneTemplateSpec struct {
	// template of the YonderControlPlane.
	// +required
	Template YonderControlPlaneTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondercontrolplanetemplates,scope=Namespaced,categories=cluster-api,shortName=ycpt
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderControlPlaneTemplate is the ClusterClass template of YonderControlPlane. Its spec is immutable.
type YonderControlPlaneTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec YonderControlPlaneTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderControlPlaneTemplateList is a list of YonderControlPlaneTemplates.
type YonderControlPlaneTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []YonderControlPlaneTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderControlPlaneTemplate{}, &YonderControlPlaneTemplateList{})
}
