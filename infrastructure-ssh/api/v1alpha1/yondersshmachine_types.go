package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// YonderSSHMachineSpec says which host a Machine may run on.
type YonderSSHMachineSpec struct {
	// providerID is yonder-ssh://<namespace>/<host>, set once the host is provisioned.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// hostSelector chooses the YonderSSHHosts this machine may claim. Empty matches every host of the namespace.
	// +optional
	HostSelector HostSelector `json:"hostSelector,omitempty"`

	// bootstrapTimeout bounds how long the bootstrap may run on the host before the machine reports
	// BootstrapFailed. Default 30m.
	// +optional
	BootstrapTimeout *metav1.Duration `json:"bootstrapTimeout,omitempty"`
}

// BootstrapPhase is where a bootstrap run on the host is.
// +kubebuilder:validation:Enum=Starting;Running;Succeeded;Failed
type BootstrapPhase string

// Bootstrap phases.
const (
	// BootstrapPhaseStarting: the controller recorded that it is about to start the run, and no check of
	// the host has found the run yet (the first comes a tenth of the poll interval after the start). A
	// controller that died before the start starts it then (runs are named by the claim identity, so a
	// start is never doubled).
	BootstrapPhaseStarting BootstrapPhase = "Starting"
	// BootstrapPhaseRunning: a check found the run on the host; should its record vanish, the host was
	// cleaned or reinstalled under the Machine, and the bootstrap fails.
	BootstrapPhaseRunning   BootstrapPhase = "Running"
	BootstrapPhaseSucceeded BootstrapPhase = "Succeeded"
	BootstrapPhaseFailed    BootstrapPhase = "Failed"
)

// BootstrapStatus records the bootstrap run on the host. The run's own record on the host
// (/var/lib/yonder-ssh/runs/<runID>) is authoritative: a restarted controller reads it instead of re-running.
type BootstrapStatus struct {
	// runID names the run directory on the host (the YonderSSHMachine's claim identity: its first UID).
	// +optional
	RunID string `json:"runID,omitempty"`
	// phase of the run.
	// +optional
	Phase BootstrapPhase `json:"phase,omitempty"`
	// startedTime is when the controller started the run.
	// +optional
	StartedTime *metav1.Time `json:"startedTime,omitempty"`
	// finishedTime is when the controller saw the run end.
	// +optional
	FinishedTime *metav1.Time `json:"finishedTime,omitempty"`
	// exitCode of the bootstrap script.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// outputTail is the last bytes (at most 2 KiB) of the run's output, recorded only when it failed.
	// The whole log stays on the host in the run directory.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	OutputTail string `json:"outputTail,omitempty"`
}

// YonderSSHMachineInitializationStatus is the CAPI v1beta2 initialization contract.
type YonderSSHMachineInitializationStatus struct {
	// provisioned is true once the bootstrap succeeded and spec.providerID is set.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// YonderSSHMachineStatus is the observed state.
type YonderSSHMachineStatus struct {
	// initialization reports provisioning to Cluster API.
	// +optional
	Initialization YonderSSHMachineInitializationStatus `json:"initialization,omitempty,omitzero"`
	// hostRef is the claimed YonderSSHHost's name (the annotation ssh.infrastructure.yonder.dev/host is durable).
	// +optional
	HostRef string `json:"hostRef,omitempty"`
	// addresses of the host.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`
	// bootstrap records the bootstrap run.
	// +optional
	Bootstrap *BootstrapStatus `json:"bootstrap,omitempty"`
	// cleanupAttempts counts failed cleanups during deletion.
	// +optional
	CleanupAttempts int32 `json:"cleanupAttempts,omitempty"`
	// conditions: HostClaimed, BootstrapExecuted, HostCleaned, Ready, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondersshmachines,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.hostRef"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderSSHMachine is the infrastructure of one Machine: a claimed YonderSSHHost bootstrapped over SSH.
type YonderSSHMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the machine.
	// +optional
	Spec YonderSSHMachineSpec `json:"spec,omitempty"`
	// status of the machine.
	// +optional
	Status YonderSSHMachineStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (m *YonderSSHMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions.
func (m *YonderSSHMachine) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// +kubebuilder:object:root=true

// YonderSSHMachineList is a list of YonderSSHMachines.
type YonderSSHMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the machines.
	Items []YonderSSHMachine `json:"items"`
}

// YonderSSHMachineTemplateResource is the template's machine.
type YonderSSHMachineTemplateResource struct {
	// metadata is copied to the machines.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the machines.
	// +required
	Spec YonderSSHMachineSpec `json:"spec"`
}

// YonderSSHMachineTemplateSpec is the template's spec.
type YonderSSHMachineTemplateSpec struct {
	// template of the machines.
	// +required
	Template YonderSSHMachineTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondersshmachinetemplates,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderSSHMachineTemplate is the template MachineDeployments and MachineSets clone YonderSSHMachines from.
type YonderSSHMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec YonderSSHMachineTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderSSHMachineTemplateList is a list of YonderSSHMachineTemplates.
type YonderSSHMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the templates.
	Items []YonderSSHMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderSSHMachine{}, &YonderSSHMachineList{}, &YonderSSHMachineTemplate{}, &YonderSSHMachineTemplateList{})
}
