package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// ConfigFinalizer lets the reconciler delete the Machine's bootstrap token from the workload cluster
	// before the YonderConfig goes away.
	ConfigFinalizer = "bootstrap.cluster.x-k8s.io/yonderconfig"

	// DataSecretFormat is the value of the data Secret's "format" key.
	DataSecretFormat = "cloud-config" //nolint:gosec // a format name, not a credential

	// TokenIDAnnotation on the data Secret records which bootstrap token (by its public id) the data
	// carries, so status can be rebuilt after clusterctl move. The token secret is never recorded.
	TokenIDAnnotation = "bootstrap.yonder.dev/token-id"

	// DefaultTokenTTLSeconds is the bootstrap token lifetime when spec.bootstrapToken.ttlSeconds is unset.
	DefaultTokenTTLSeconds = 900

	// TokenRefreshUntilAnnotation on the data Secret records (RFC 3339) until when the Machine's bootstrap
	// token is extended or replaced: the data Secret's first write plus spec.bootstrapToken.refreshSeconds.
	// Past it the token is deleted and never renewed. It moves with the Secret (clusterctl move), so a move
	// does not restart the window.
	TokenRefreshUntilAnnotation = "bootstrap.yonder.dev/token-refresh-until"

	// DefaultTokenRefreshSeconds is how long a Machine's token is kept usable when
	// spec.bootstrapToken.refreshSeconds is unset (24 hours).
	DefaultTokenRefreshSeconds = 86400
)

// Conditions and reasons.
const (
	// YonderConfigDataSecretAvailableCondition is True once the bootstrap data Secret exists.
	YonderConfigDataSecretAvailableCondition = "DataSecretAvailable"
	// YonderConfigDataSecretAvailableReason: the data Secret exists.
	YonderConfigDataSecretAvailableReason = "Available"
	// YonderConfigWaitingForClusterConnectionReason: the workload cluster cannot be reached to create the token.
	YonderConfigWaitingForClusterConnectionReason = "WaitingForClusterConnection"
	// YonderConfigAgentSourceMissingReason: neither spec.agent nor the manager's --agent-url/--agent-sha256 are set.
	YonderConfigAgentSourceMissingReason = "AgentSourceMissing"
	// YonderConfigNodeImageUnavailableReason: the node image of the Machine's Kubernetes version cannot be
	// resolved in the image repository (not pushed or mirrored, registry unreachable, credentials or CA wrong).
	YonderConfigNodeImageUnavailableReason = "NodeImageUnavailable"
	// YonderConfigInvalidConfigurationReason: the spec cannot be rendered (a referenced Secret is missing, no
	// control plane endpoint, no CA in the cluster kubeconfig…).
	YonderConfigInvalidConfigurationReason = "InvalidConfiguration"

	// YonderConfigBootstrapTokenReadyCondition is True while the Machine has a valid bootstrap token, and after it
	// joined (the token is then deleted).
	YonderConfigBootstrapTokenReadyCondition = "BootstrapTokenReady"
	// YonderConfigBootstrapTokenValidReason: the token exists and is refreshed until the Node joins.
	YonderConfigBootstrapTokenValidReason = "Valid"
	// YonderConfigBootstrapTokenRemovedReason: the Node joined; the token was deleted.
	YonderConfigBootstrapTokenRemovedReason = "NodeJoined"
	// YonderConfigBootstrapTokenFailedReason: creating or refreshing the token failed.
	YonderConfigBootstrapTokenFailedReason = "Failed"
	// YonderConfigBootstrapTokenRefreshWindowExpiredReason: the Node did not join within
	// spec.bootstrapToken.refreshSeconds; the token was deleted and is not renewed.
	YonderConfigBootstrapTokenRefreshWindowExpiredReason = "RefreshWindowExpired"
	// YonderConfigBootstrapTokenMachineRemediatingReason: a MachineHealthCheck marked the Machine for
	// remediation (condition OwnerRemediated) before it joined; the token was deleted and is not renewed.
	YonderConfigBootstrapTokenMachineRemediatingReason = "MachineRemediating"
)

// Taint is a Node taint set at registration.
type Taint struct {
	// key of the taint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Key string `json:"key"`
	// value of the taint.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Value string `json:"value,omitempty"`
	// effect: NoSchedule, PreferNoSchedule or NoExecute.
	// +required
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect string `json:"effect"`
}

// Arg is a command line flag without leading dashes.
type Arg struct {
	// name of the flag, e.g. "max-pods".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// value of the flag.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// Source is a file fetched from a URL or found at a local path, verified by sha256.
type Source struct {
	// url to download from (http or https). Exactly one of url and path.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
	// path of a local copy on the host (offline bundle). Exactly one of url and path.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path,omitempty"`
	// sha256 is the hex digest the content must have.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256,omitempty"`
}

// Artifact is a named Source the agent installs (containerd, kubelet, CNI plugins…).
type Artifact struct {
	// name of the artifact, unique in the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// source of the artifact.
	Source `json:",inline"`
}

// Rootfs selects the node's root filesystem; at most one of image and archive.
type Rootfs struct {
	// image is an OCI image reference, preferably digest-pinned.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`
	// archive is a tar archive of the root filesystem.
	// +optional
	Archive *Source `json:"archive,omitempty"`
}

// Images says where a node's software comes from: the node image of the Machine's Kubernetes version
// (<repository>/yonder-node:<version>, resolved to its digest when the bootstrap data is rendered) and,
// unless spec.agent is set, yonder-agent (<repository>/yonder-agent, fetched by its sha256).
type Images struct {
	// repository is the prefix of Yonder's images, e.g. ghcr.io/yonder-dev or a mirror such as
	// registry.example:5000/yonder. Empty: the manager's --image-repository.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`
	Repository string `json:"repository,omitempty"`
	// pullSecretName is a kubernetes.io/dockerconfigjson Secret in this namespace with credentials for the
	// repository's registry; the host and the node's containerd use them too. Empty: anonymous.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PullSecretName string `json:"pullSecretName,omitempty"`
	// caSecretName is a Secret in this namespace whose key ca.crt is the PEM CA of the registry's TLS
	// certificate (private registries, mirrors). Empty: the system roots.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CASecretName string `json:"caSecretName,omitempty"`
	// mirrorOf are upstream registries (e.g. ghcr.io, registry.k8s.io) whose images the node's containerd
	// pulls from the repository's registry instead, under the same paths: an air-gapped site's mirror.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	MirrorOf []string `json:"mirrorOf,omitempty"`
}

// GPU selects GPU handling.
type GPU struct {
	// mode: None (default), Auto (detect NVIDIA/AMD), NVIDIA or AMD (required).
	// +optional
	// +kubebuilder:validation:Enum=None;Auto;NVIDIA;AMD
	Mode string `json:"mode,omitempty"`
}

// SecretKeySelector selects a key of a Secret in the YonderConfig's namespace.
type SecretKeySelector struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// File is written on the host by the agent before preCommands.
type File struct {
	// path on the host, absolute.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// content of the file. Exactly one of content and contentFrom.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`
	// contentFrom reads the content from a Secret in this namespace when the data is rendered.
	// +optional
	ContentFrom *SecretKeySelector `json:"contentFrom,omitempty"`
	// permissions in octal (default "0644").
	// +optional
	// +kubebuilder:validation:Pattern=`^0?[0-7]{3,4}$`
	Permissions string `json:"permissions,omitempty"`
	// owner as "user" or "user:group" (default root:root).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Owner string `json:"owner,omitempty"`
}

// BootstrapToken configures the Machine's bootstrap token.
type BootstrapToken struct {
	// ttlSeconds is the token's lifetime; it is extended while the Machine has not joined (default 900,
	// 60 to 86400).
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	TTLSeconds int32 `json:"ttlSeconds,omitempty"`

	// refreshSeconds bounds how long after the bootstrap data was first written the token is extended
	// or replaced for the Node to join (default 86400, 600 to 604800). Past it, or once a
	// MachineHealthCheck marks the Machine for remediation, the token is deleted and never renewed: a
	// Machine that failed or will never join holds no live credential. Delete the Machine to try again.
	// +optional
	// +kubebuilder:validation:Minimum=600
	// +kubebuilder:validation:Maximum=604800
	RefreshSeconds int32 `json:"refreshSeconds,omitempty"`
}

// YonderConfigSpec is what an operator sets per pool of workers.
type YonderConfigSpec struct {
	// version is the Kubernetes (kubelet) version. Default: the Machine's spec.version, else the control
	// plane's status.version.
	// +optional
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?$`
	Version string `json:"version,omitempty"`

	// nodeLabels are set on the Node at registration.
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// nodeTaints are set on the Node at registration.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	NodeTaints []Taint `json:"nodeTaints,omitempty"`

	// kubeletExtraArgs are appended to the kubelet command line.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	KubeletExtraArgs []Arg `json:"kubeletExtraArgs,omitempty"`

	// site is the network site (network.yonder.dev Site) of the node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Site string `json:"site,omitempty"`

	// agent is where the host gets yonder-agent: url (or path of an offline copy) and sha256. Default: the
	// manager's --agent-url and --agent-sha256.
	// +optional
	Agent Source `json:"agent,omitempty,omitzero"`

	// images says where the node image (by the Kubernetes version) and the agent come from.
	// +optional
	Images Images `json:"images,omitempty,omitzero"`

	// rootfs overrides the node's root filesystem (image or archive); empty: the node image from images.
	// +optional
	Rootfs Rootfs `json:"rootfs,omitempty,omitzero"`

	// artifacts the agent installs, each verified by sha256.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Artifacts []Artifact `json:"artifacts,omitempty"`

	// gpu selects GPU handling.
	// +optional
	GPU GPU `json:"gpu,omitempty,omitzero"`

	// files are written on the host before preCommands.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=100
	Files []File `json:"files,omitempty"`

	// preCommands run before the agent prepares the host.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	PreCommands []string `json:"preCommands,omitempty"`

	// postCommands run after the kubelet started.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	PostCommands []string `json:"postCommands,omitempty"`

	// bootstrapToken configures the Machine's bootstrap token.
	// +optional
	BootstrapToken BootstrapToken `json:"bootstrapToken,omitempty,omitzero"`
}

// YonderConfigInitializationStatus is the contract's initialization block.
type YonderConfigInitializationStatus struct {
	// dataSecretCreated is true once the data Secret exists.
	// +optional
	DataSecretCreated *bool `json:"dataSecretCreated,omitempty"`
}

// YonderConfigStatus is the observed state. It never holds the token.
// +kubebuilder:validation:MinProperties=1
type YonderConfigStatus struct {
	// conditions: DataSecretAvailable, BootstrapTokenReady, Ready (summary), Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization tells CAPI the data Secret exists.
	// +optional
	Initialization YonderConfigInitializationStatus `json:"initialization,omitempty,omitzero"`

	// dataSecretName is the name of the data Secret (the YonderConfig's name).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DataSecretName string `json:"dataSecretName,omitempty"`

	// observedGeneration is the generation this status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yonderconfigs,scope=Namespaced,categories=cluster-api,shortName=ycfg
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Data",type="boolean",JSONPath=".status.initialization.dataSecretCreated"
// +kubebuilder:printcolumn:name="Token",type="string",JSONPath=".status.conditions[?(@.type==\"BootstrapTokenReady\")].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderConfig renders one Machine's bootstrap data: cloud-init that installs yonder-agent and writes its
// AgentConfig, with a bootstrap token created in the workload cluster.
type YonderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +optional
	Spec YonderConfigSpec `json:"spec,omitempty,omitzero"`
	// status is the observed state.
	// +optional
	Status YonderConfigStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the v1beta2 conditions.
func (c *YonderConfig) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the v1beta2 conditions.
func (c *YonderConfig) SetConditions(conditions []metav1.Condition) { c.Status.Conditions = conditions }

// +kubebuilder:object:root=true

// YonderConfigList is a list of YonderConfigs.
type YonderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []YonderConfig `json:"items"`
}

// YonderConfigTemplateResource is what a MachineDeployment or ClusterClass stamps out.
type YonderConfigTemplateResource struct {
	// metadata is copied to generated YonderConfigs.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of generated YonderConfigs.
	// +optional
	Spec YonderConfigSpec `json:"spec,omitempty,omitzero"`
}

// YonderConfigTemplateSpec holds the template.
type YonderConfigTemplateSpec struct {
	// template of the YonderConfig.
	// +required
	Template YonderConfigTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yonderconfigtemplates,scope=Namespaced,categories=cluster-api,shortName=ycfgt
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderConfigTemplate is the template of YonderConfig. Its spec is immutable.
type YonderConfigTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec YonderConfigTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderConfigTemplateList is a list of YonderConfigTemplates.
type YonderConfigTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []YonderConfigTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderConfig{}, &YonderConfigList{}, &YonderConfigTemplate{}, &YonderConfigTemplateList{})
}
