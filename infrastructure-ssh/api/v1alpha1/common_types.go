package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretReference names a Secret in the namespace of the object that holds the reference.
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace of the Secret. Secrets are only read from the referencing object's own namespace; the field
	// exists so that a reference to another namespace is rejected with a clear message instead of being
	// silently re-pointed. Leave it empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// HostSelector chooses YonderSSHHosts by their labels.
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
