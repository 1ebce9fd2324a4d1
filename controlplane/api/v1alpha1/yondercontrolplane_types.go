package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// KubeconfigSecretKeyDefault is the key of spec.kubeconfigSecretRef read when none is given.
	KubeconfigSecretKeyDefault = "value"

	// KubeconfigSecretNameSuffix names the source Secret when spec.kubeconfigSecretRef.name is empty:
	// "<cluster>-external-kubeconfig". It makes a YonderControlPlaneTemplate usable in a ClusterClass
	// without a per-Cluster patch.
	KubeconfigSecretNameSuffix = "-external-kubeconfig" //nolint:gosec // a name suffix, not a credential
)

// Conditions and their reasons. A condition message says what to do.
const (

	// YonderControlPlaneKubeconfigValidCondition is True when the source Secret holds a usable admin kubeconfig.
	YonderControlPlaneKubeconfigValidCondition = "KubeconfigValid"
	// YonderControlPlaneKubeconfigValidReason: the kubeconfig parsed, authenticated and reached the API server.
	YonderControlPlaneKubeconfigValidReason = "Valid"
	// YonderControlPlaneKubeconfigSecretNotFoundReason: the Secret named by spec.kubeconfigSecretRef does not exist.
	YonderControlPlaneKubeconfigSecretNotFoundReason = "SecretNotFound"
	// YonderControlPlaneKubeconfigSecretForeignReason: the Secret named by spec.kubeconfigSecretRef belongs to another
	// Cluster (its cluster.x-k8s.io/cluster-name label or an owner Cluster names another Cluster); it is neither
	// read nor relabelled.
	YonderControlPlaneKubeconfigSecretForeignReason = "SecretBelongsToAnotherCluster"
	// YonderControlPlaneKubeconfigKeyNotFoundReason: the Secret exists but has no data under spec.kubeconfigSecretRef.key.
	YonderControlPlaneKubeconfigKeyNotFoundReason = "KeyNotFound"
	// YonderControlPlaneKubeconfigInvalidReason: the data is not a kubeconfig with a current context, cluster and user.
	YonderControlPlaneKubeconfigInvalidReason = "InvalidKubeconfig"
	// YonderControlPlaneKubeconfigUnsupportedAuthReason: the kubeconfig authenticates through an exec plugin, an auth
	// provider or files on disk, none of which work inside the management cluster.
	YonderControlPlaneKubeconfigUnsupportedAuthReason = "UnsupportedAuth"
	// YonderControlPlaneKubeconfigUnauthorizedReason: the API server rejected the credentials (401/403).
	YonderControlPlaneKubeconfigUnauthorizedReason = "Unauthorized"
	// YonderControlPlaneKubeconfigUnreachableReason: the API server did not answer (network, DNS, TLS).
	YonderControlPlaneKubeconfigUnreachableReason = "Unreachable"

	// YonderControlPlaneJoinRBACReadyCondition is True when the RBAC that lets nodes join is installed in the workload cluster.
	YonderControlPlaneJoinRBACReadyCondition = "JoinRBACReady"
	// YonderControlPlaneJoinRBACInstalledReason: the ClusterRoleBindings exist and match.
	YonderControlPlaneJoinRBACInstalledReason = "Installed"
	// YonderControlPlaneJoinRBACFailedReason: applying the ClusterRoleBindings failed (typically forbidden).
	YonderControlPlaneJoinRBACFailedReason = "ApplyFailed"
	// YonderControlPlaneJoinRBACWaitingForKubeconfigReason: no valid kubeconfig yet.
	YonderControlPlaneJoinRBACWaitingForKubeconfigReason = "WaitingForKubeconfig"

	// YonderControlPlaneVersionUpToDateCondition is True when the attached cluster runs at least spec.version (or spec.version
	// is empty). Yonder never upgrades an attached control plane: when a ClusterClass topology (or a user)
	// raises spec.version, CAPI holds worker upgrades until the cluster's own tooling (AKS, EKS, kubeadm…)
	// has upgraded the API server, and this condition says so.
	YonderControlPlaneVersionUpToDateCondition = "VersionUpToDate"
	// YonderControlPlaneVersionUpToDateReason: the API server's version is at least spec.version.
	YonderControlPlaneVersionUpToDateReason = "UpToDate"
	// YonderControlPlaneVersionNotRequestedReason: spec.version is empty; whatever the cluster runs is accepted.
	YonderControlPlaneVersionNotRequestedReason = "NotRequested"
	// YonderControlPlaneVersionUpgradeRequiredReason: the API server is older than spec.version; upgrade the attached
	// cluster with its own tooling.
	YonderControlPlaneVersionUpgradeRequiredReason = "UpgradeRequired"
	// YonderControlPlaneVersionUnknownReason: the API server has not answered yet.
	YonderControlPlaneVersionUnknownReason = "Unknown"
)

// KubeconfigSecretReference names a Secret in the YonderControlPlane's namespace and a key in it.
type KubeconfigSecretReference struct {
	// name of the Secret. Empty means "<cluster>-external-kubeconfig".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name,omitempty"`

	// key in the Secret's data holding the kubeconfig (default "value").
	// +optional
	// +kubebuilder:default=value
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// YonderControlPlaneSpec attaches an existing cluster.
type YonderControlPlaneSpec struct {
	// kubeconfigSecretRef names the Secret, in this object's namespace, that holds an admin kubeconfig of
	// the existing cluster. The kubeconfig must carry its credentials inline (client certificate or token);
	// exec plugins and auth providers are rejected. Rotating the Secret's content updates
	// "<cluster>-kubeconfig".
	// +optional
	KubeconfigSecretRef KubeconfigSecretReference `json:"kubeconfigSecretRef,omitempty,omitzero"`

	// controlPlaneEndpoint is the API server endpoint nodes use. When empty it is set from the
	// kubeconfig's server URL.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// version is the Kubernetes version the attached cluster is expected to run (e.g. v1.36.3). It is the
	// field a ClusterClass topology sets from Cluster.spec.topology.version. Yonder does not upgrade an
	// attached control plane: when the API server reports an older version, the VersionUpToDate condition
	// is False and CAPI (which compares spec.version with status.version) waits with worker upgrades
	// until the cluster has been upgraded with its own tooling. Empty accepts any version.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$`
	Version string `json:"version,omitempty"`
}

// YonderControlPlaneInitializationStatus is the CAPI contract's initialization block.
type YonderControlPlaneInitializationStatus struct {
	// controlPlaneInitialized is true once the existing cluster's API server answered; it stays true.
	// +optional
	ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
}

// YonderControlPlaneStatus is the observed state.
// +kubebuilder:validation:MinProperties=1
type YonderControlPlaneStatus struct {
	// conditions: Available, KubeconfigValid, JoinRBACReady, VersionUpToDate, Ready (summary) and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization tells CAPI the control plane is initialized.
	// +optional
	Initialization YonderControlPlaneInitializationStatus `json:"initialization,omitempty,omitzero"`

	// externalManagedControlPlane is always true: the control plane has no Machines.
	// +optional
	ExternalManagedControlPlane *bool `json:"externalManagedControlPlane,omitempty"`

	// version is the Kubernetes version the API server reports at /version, reduced to
	// vMAJOR.MINOR.PATCH (e.g. v1.30.4 for EKS's v1.30.4-eks-a737599): CAPI compares it with spec.version
	// as semver, where a vendor suffix would read as a pre-release and look older than the release it is.
	// The full version is in the Available condition's message.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// observedGeneration is the generation this status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondercontrolplanes,scope=Namespaced,categories=cluster-api,shortName=ycp
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Initialized",type="boolean",JSONPath=".status.initialization.controlPlaneInitialized"
// +kubebuilder:printcolumn:name="Available",type="string",JSONPath=".status.conditions[?(@.type==\"Available\")].status"
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".status.version"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderControlPlane attaches an EXISTING conformant cluster (AKS, EKS, GKE, kubeadm, k3s…) as a CAPI
// Cluster's control plane.
type YonderControlPlane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +optional
	Spec YonderControlPlaneSpec `json:"spec,omitempty,omitzero"`
	// status is the observed state.
	// +optional
	Status YonderControlPlaneStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the v1beta2 conditions.
func (c *YonderControlPlane) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the v1beta2 conditions.
func (c *YonderControlPlane) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// KubeconfigSecretName is the source Secret's name for a Cluster.
func (c *YonderControlPlane) KubeconfigSecretName(clusterName string) string {
	if c.Spec.KubeconfigSecretRef.Name != "" {
		return c.Spec.KubeconfigSecretRef.Name
	}
	return clusterName + KubeconfigSecretNameSuffix
}

// KubeconfigSecretKey is the key read from the source Secret.
func (c *YonderControlPlane) KubeconfigSecretKey() string {
	if c.Spec.KubeconfigSecretRef.Key != "" {
		return c.Spec.KubeconfigSecretRef.Key
	}
	return KubeconfigSecretKeyDefault
}

// +kubebuilder:object:root=true

// YonderControlPlaneList is a list of YonderControlPlanes.
type YonderControlPlaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []YonderControlPlane `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderControlPlane{}, &YonderControlPlaneList{})
}
