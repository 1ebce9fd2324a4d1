package v1alpha1

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
