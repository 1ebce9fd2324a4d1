package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostSelector chooses BareMetalHosts by their labels.
type HostSelector struct {
	// matchLabels are labels a host must carry, with these values.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// matchExpressions are label requirements a host must meet (operators In, NotIn, Exists, DoesNotExist).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelector returns the selector as a metav1.LabelSelector.
func (s HostSelector) LabelSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions}
}
