package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// RemediationFinalizer lets a YonderMetalRemediation take its reboot annotation off the host before it goes
// away: a keyed reboot.metal3.io annotation left behind would hold the host powered off for ever.
const RemediationFinalizer = "yondermetalremediation.infrastructure.cluster.x-k8s.io"

// RemediationType is a remediation strategy (Metal3Remediation's values that Yonder implements).
// +kubebuilder:validation:Enum=Reboot
type RemediationType string

// RebootRemediationStrategy power-cycles the Machine's host (hard) and waits for its Node.
const RebootRemediationStrategy RemediationType = "Reboot"

// MinRemediationTimeout is the shortest spec.strategy.timeout accepted: less than a host needs to power
// on, boot and have its kubelet report Ready, so every such remediation would end in a replacement.
const MinRemediationTimeout = "10s"

// RemediationStrategy says how a host is remediated, shaped like Metal3Remediation's.
type RemediationStrategy struct {
	// type of the remediation. Only Reboot: a hard power cycle of the claimed BareMetalHost through
	// Metal3's reboot.metal3.io/<key> annotation.
	// +optional
	// +kubebuilder:default=Reboot
	Type RemediationType `json:"type,omitempty"`

	// retryLimit is how many power cycles are tried before the Machine is handed to CAPI for replacement.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	RetryLimit int32 `json:"retryLimit,omitempty"`

	// timeout is how long, after a power cycle, the Node has to become healthy (the MachineHealthCheck
	// then deletes this remediation) before the next power cycle or the replacement. At least 10s.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="timeout must be a duration of at least 10s (e.g. 10m): a host cannot power on, boot and report its Node Ready in less"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// YonderMetalRemediationSpec is what a MachineHealthCheck asks of an unhealthy Machine's host.
type YonderMetalRemediationSpec struct {
	// strategy of the remediation.
	// +optional
	// +kubebuilder:default={}
	Strategy RemediationStrategy `json:"strategy,omitzero"`
}

// RemediationPhase is where a remediation stands.
// +kubebuilder:validation:Enum=Running;Waiting;Deleting;Failed
type RemediationPhase string

const (
	// RemediationRunning means a power cycle is under way; the host carries this attempt's reboot annotation
	// until it has been seen powered off.
	RemediationRunning RemediationPhase = "Running"
	// RemediationWaiting means the host was power-cycled (lastRemediated); the Node has spec.strategy.timeout to
	// become healthy, after which the next power cycle starts or, with retryLimit reached, the Machine is
	// replaced.
	RemediationWaiting RemediationPhase = "Waiting"
	// RemediationDeleting means power cycles did not help (or the Machine has no host to power-cycle); the
	// Machine's OwnerRemediated condition is False, so its MachineSet deletes and replaces it. This object
	// goes with the Machine.
	RemediationDeleting RemediationPhase = "Deleting"
	// RemediationFailed means the Machine needs replacing but nothing would do it (no MachineSet or control plane
	// owns it, or it is not a YonderMetalMachine's); the MachineReplacementRequested condition says what to
	// do.
	RemediationFailed RemediationPhase = "Failed"
)

// YonderMetalRemediationStatus is the progress of a remediation.
type YonderMetalRemediationStatus struct {
	// phase of the remediation: Running, Waiting, Deleting or Failed.
	// +optional
	Phase RemediationPhase `json:"phase,omitempty"`
	// retryCount is the number of power cycles started.
	// +optional
	RetryCount int32 `json:"retryCount,omitempty"`
	// hostRef is the BareMetalHost being power-cycled (the Machine's claimed host).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	HostRef string `json:"hostRef,omitempty"`
	// rebootRequestedAt is when the current power cycle was requested on the host.
	// +optional
	RebootRequestedAt *metav1.Time `json:"rebootRequestedAt,omitempty"`
	// lastRemediated is when the host of the current power cycle was seen powered off and let power on
	// again; spec.strategy.timeout counts from here.
	// +optional
	LastRemediated *metav1.Time `json:"lastRemediated,omitempty"`
	// conditions: HostPowerCycled, MachineReplacementRequested, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalremediations,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Retries",type="integer",JSONPath=".status.retryCount"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.hostRef"
// +kubebuilder:printcolumn:name="LastRemediated",type="date",JSONPath=".status.lastRemediated"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalRemediation is the external remediation of one unhealthy Machine on a BareMetalHost: a
// MachineHealthCheck creates it from a YonderMetalRemediationTemplate, named after and owned by the
// Machine, and deletes it once the Machine's Node is healthy again.
type YonderMetalRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the remediation.
	// +optional
	Spec YonderMetalRemediationSpec `json:"spec,omitzero"`
	// status of the remediation.
	// +optional
	Status YonderMetalRemediationStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (r *YonderMetalRemediation) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions sets the conditions.
func (r *YonderMetalRemediation) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }

// +kubebuilder:object:root=true

// YonderMetalRemediationList is a list of YonderMetalRemediations.
type YonderMetalRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the remediations.
	Items []YonderMetalRemediation `json:"items"`
}

// YonderMetalRemediationTemplateResource is the template's remediation.
type YonderMetalRemediationTemplateResource struct {
	// metadata is copied to the remediations.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the remediations.
	// +optional
	// +kubebuilder:default={}
	Spec YonderMetalRemediationSpec `json:"spec,omitzero"`
}

// YonderMetalRemediationTemplateSpec is the template's spec.
type YonderMetalRemediationTemplateSpec struct {
	// template of the remediations.
	// +required
	Template YonderMetalRemediationTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalremediationtemplates,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Strategy",type="string",JSONPath=".spec.template.spec.strategy.type"
// +kubebuilder:printcolumn:name="RetryLimit",type="integer",JSONPath=".spec.template.spec.strategy.retryLimit"
// +kubebuilder:printcolumn:name="Timeout",type="string",JSONPath=".spec.template.spec.strategy.timeout"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalRemediationTemplate is what a MachineHealthCheck's spec.remediation.templateRef names: the
// MachineHealthCheck clones a YonderMetalRemediation from it for each unhealthy Machine.
type YonderMetalRemediationTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec YonderMetalRemediationTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderMetalRemediationTemplateList is a list of YonderMetalRemediationTemplates.
type YonderMetalRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the templates.
	Items []YonderMetalRemediationTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderMetalRemediation{}, &YonderMetalRemediationList{},
		&YonderMetalRemediationTemplate{}, &YonderMetalRemediationTemplateList{})
}
