package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostKeyPolicy says how a host's SSH host key is trusted.
// +kubebuilder:validation:Enum=Pinned;TrustOnFirstUse
type HostKeyPolicy string

const (
	// HostKeyPolicyPinned accepts only spec.hostKey; a host without it is never contacted.
	HostKeyPolicyPinned HostKeyPolicy = "Pinned"
	// HostKeyPolicyTrustOnFirstUse records the key presented at the first probe into spec.hostKey and
	// sets the policy to Pinned: trust on first use is spent once a key is recorded.
	HostKeyPolicyTrustOnFirstUse HostKeyPolicy = "TrustOnFirstUse"
)

// HostPhase is a YonderSSHHost's place in its life cycle.
// +kubebuilder:validation:Enum=Available;Claimed;Provisioning;Provisioned;Releasing;Unreachable;Error
type HostPhase string

// Host phases.
const (
	HostPhaseAvailable    HostPhase = "Available"
	HostPhaseClaimed      HostPhase = "Claimed"
	HostPhaseProvisioning HostPhase = "Provisioning"
	HostPhaseProvisioned  HostPhase = "Provisioned"
	HostPhaseReleasing    HostPhase = "Releasing"
	HostPhaseUnreachable  HostPhase = "Unreachable"
	HostPhaseError        HostPhase = "Error"
)

// SSHEndpoint is where and how to log in over SSH.
type SSHEndpoint struct {
	// address is the host's IP address or DNS name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Address string `json:"address"`

	// port is sshd's TCP port.
	// +optional
	// +kubebuilder:default=22
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// user is the login user. Commands run through `sudo` when it is not root.
	// +optional
	// +kubebuilder:default=root
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	User string `json:"user,omitempty"`

	// credentialsSecretRef names a Secret in the same namespace holding the login's private key under
	// `ssh-privatekey` (OpenSSH or PEM, unencrypted) and, optionally, the sudo password under `sudo-password`.
	// +required
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// hostKey is the host's public SSH host key in authorized_keys format ("ssh-ed25519 AAAA…"). Every
	// connection verifies it; with hostKeyPolicy TrustOnFirstUse the controller records it here at the first probe.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	HostKey string `json:"hostKey,omitempty"`

	// hostKeyPolicy is Pinned (default: only hostKey is accepted, and a host without one is never
	// contacted) or TrustOnFirstUse (the first key seen is recorded in hostKey and the policy becomes
	// Pinned). Clearing a recorded hostKey re-arms trust on first use only in an update that also changes
	// this field from Pinned to TrustOnFirstUse; while the host is claimed neither field can change.
	// +optional
	// +kubebuilder:default=Pinned
	HostKeyPolicy HostKeyPolicy `json:"hostKeyPolicy,omitempty"`
}

// CleanupSpec says how a host is cleaned when its Machine goes away.
type CleanupSpec struct {
	// commands run, in order, as root through `sh -c`, when the host has no `yonder-agent` on its PATH
	// (with the agent, `yonder-agent reset` runs instead). A failing command fails the cleanup.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Commands []string `json:"commands,omitempty"`
	// keepAgentCache keeps the agent's caches when the host is cleaned (`yonder-agent reset
	// --keep-cache`): the verified artifacts (kubelet, containerd, CNI plugins, images; by sha256), the
	// rootfs archive, the node images and the rootfs tree unpacked from them, under <state-dir>/cache. The
	// next Machine on the host skips their downloads and the unpacking; every cached file is hashed again
	// and compared with its pinned sha256 before it is used.
	// Off by default: a released host is left as it was found, caches included. Without the agent on the
	// host (commands run instead) it has no effect.
	// +optional
	KeepAgentCache bool `json:"keepAgentCache,omitempty"`
}

// ConsumerReference names the YonderSSHMachine that has claimed a host.
type ConsumerReference struct {
	// apiGroup of the consumer.
	// +required
	// +kubebuilder:validation:MinLength=1
	APIGroup string `json:"apiGroup"`
	// kind of the consumer.
	// +required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// name of the consumer, in the host's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the consumer, so a re-created object with the same name is a different consumer.
	// +required
	// +kubebuilder:validation:MinLength=1
	UID string `json:"uid"`
	// clusterName is the Cluster of the consumer's Machine, used to spread a Cluster's Machines over
	// failure domains.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
}

// YonderSSHHostSpec describes one existing Linux host of the inventory.
type YonderSSHHostSpec struct {
	SSHEndpoint `json:",inline"`

	// bastion is an optional jump host the connection goes through; the same fields and the same host key
	// rules apply to it.
	// +optional
	Bastion *SSHEndpoint `json:"bastion,omitempty"`

	// failureDomain is the failure domain (rack, site, zone) the host is in.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// cleanup says how the host is cleaned when its Machine is deleted.
	// +optional
	Cleanup CleanupSpec `json:"cleanup,omitempty"`

	// consumerRef is the YonderSSHMachine that has claimed this host. It is written by the controller
	// (with optimistic concurrency, so two Machines never claim one host) and cleared when the host is
	// released. Do not set it by hand.
	// +optional
	ConsumerRef *ConsumerReference `json:"consumerRef,omitempty"`
}

// HostFacts are what a probe over SSH found on the host.
type HostFacts struct {
	// hostname as the host reports it.
	// +optional
	Hostname string `json:"hostname,omitempty"`
	// os is the PRETTY_NAME of /etc/os-release.
	// +optional
	OS string `json:"os,omitempty"`
	// kernel is `uname -r`.
	// +optional
	Kernel string `json:"kernel,omitempty"`
	// arch is `uname -m`.
	// +optional
	Arch string `json:"arch,omitempty"`
	// cpus is the number of online CPUs.
	// +optional
	CPUs int32 `json:"cpus,omitempty"`
	// memoryBytes is MemTotal.
	// +optional
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// gpus lists the GPUs on the PCI bus: NVIDIA, AMD and Intel display controllers and NVIDIA and AMD
	// processing accelerators, named by nvidia-smi, else lspci, else vendor and PCI device ID. Their count
	// and vendor are also the host's labels ssh.infrastructure.yonder.dev/gpu-count and gpu-vendor.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	GPUs []string `json:"gpus,omitempty"`
	// agent is true when `yonder-agent` is on the host's PATH.
	// +optional
	Agent bool `json:"agent,omitempty"`
}

// YonderSSHHostStatus is the observed state of a host. It is rebuilt from spec and probes, so
// `clusterctl move` (which drops status) loses nothing.
type YonderSSHHostStatus struct {
	// phase summarises the host's life cycle.
	// +optional
	Phase HostPhase `json:"phase,omitempty"`
	// consumerRef mirrors spec.consumerRef for display.
	// +optional
	ConsumerRef *ConsumerReference `json:"consumerRef,omitempty"`
	// lastProbeTime is when the host was last probed over SSH, successfully or not.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// facts gathered by the last successful probe.
	// +optional
	Facts *HostFacts `json:"facts,omitempty"`
	// conditions: Reachable (last probe) and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondersshhosts,scope=Namespaced,categories=cluster-api;yonder,shortName=ysh
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Address",type="string",JSONPath=".spec.address"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Consumer",type="string",JSONPath=".spec.consumerRef.name"
// +kubebuilder:printcolumn:name="FailureDomain",type="string",JSONPath=".spec.failureDomain"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderSSHHost is one existing Linux host in the inventory. YonderSSHMachines claim and release it;
// nothing in Cluster API ever deletes it.
type YonderSSHHost struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the host.
	// +required
	Spec YonderSSHHostSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status YonderSSHHostStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (h *YonderSSHHost) GetConditions() []metav1.Condition { return h.Status.Conditions }

// SetConditions sets the conditions.
func (h *YonderSSHHost) SetConditions(c []metav1.Condition) { h.Status.Conditions = c }

// +kubebuilder:object:root=true

// YonderSSHHostList is a list of YonderSSHHosts.
type YonderSSHHostList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the hosts.
	Items []YonderSSHHost `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderSSHHost{}, &YonderSSHHostList{})
}
