package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ChecksumType is the algorithm of an image checksum (Metal3's values).
// +kubebuilder:validation:Enum=md5;sha256;sha512;auto
type ChecksumType string

// ImageFormat is the format of an image (Metal3's values); live-iso is not written to disk.
// +kubebuilder:validation:Enum=raw;qcow2;vdi;vmdk;live-iso
type ImageFormat string

// LiveISOFormat writes nothing to the root device: the boot server downloads and verifies the ISO, and the
// attested host SAN-boots it on every boot. As in Metal3, the ISO receives no bootstrap data.
const LiveISOFormat ImageFormat = "live-iso"

// Image is what the host boots: written to its root device, or nothing written (format live-iso). It is
// copied as is into the claimed BareMetalHost's spec.image.
type Image struct {
	// url of the image (http, https or oci).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|oci)://`
	URL string `json:"url"`

	// checksum of the image: the digest itself, or an http(s) URL of a checksum file. Required unless
	// format is live-iso or url is oci://.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Checksum string `json:"checksum,omitempty"`

	// checksumType is the checksum's algorithm (md5, sha256, sha512, or auto to detect it).
	// +optional
	ChecksumType ChecksumType `json:"checksumType,omitempty"`

	// format of the image: raw or qcow2 (written to the root device and booted); vdi and vmdk are refused;
	// live-iso writes nothing: the host SAN-boots the ISO (http or https) from the boot server on every
	// boot, and the ISO receives no bootstrap data (Metal3's semantics), so it must join by itself.
	// +optional
	Format ImageFormat `json:"format,omitempty"`
}

// DisklessDeployMethod is the one customDeploy method Yonder's host controller implements: the attested
// provisioning ramdisk runs the Machine's bootstrap data (Yonder's cloud-config) itself, so the agent and
// the Node live in the host's memory and nothing is written to its disks. A reboot loses the Node.
const DisklessDeployMethod = "yonder-diskless"

// CustomDeploy names a deploy method of the host controller instead of an image.
type CustomDeploy struct {
	// method is the deploy method's name. The only one is yonder-diskless: the host's attested provisioning
	// ramdisk runs the Node from memory, nothing is written to its disks, and a reboot loses the Node.
	// +required
	// +kubebuilder:validation:Enum=yonder-diskless
	Method string `json:"method"`
}

// AutomatedCleaningMode is how a host's disks are cleaned when it is deprovisioned (Metal3's values).
// +kubebuilder:validation:Enum=metadata;disabled
type AutomatedCleaningMode string

// ProviderIDPrefix starts every providerID of the bare-metal provider.
const ProviderIDPrefix = "yonder-metal://"

// ProviderID is the providerID of a Machine on BareMetalHost namespace/host. It names the host, not the
// Machine: a reused host's Node carries the same providerID again, and the host's config drive can carry
// it before any Machine is known (meta data key "providerid").
func ProviderID(namespace, host string) string { return ProviderIDPrefix + namespace + "/" + host }

// YonderMetalMachineSpec says which host a Machine may claim and what it boots.
type YonderMetalMachineSpec struct {
	// providerID is yonder-metal://<namespace>/<host>, set once the host is provisioned.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// image the host boots. Exactly one of image and customDeploy is set.
	// +optional
	Image *Image `json:"image,omitempty"`

	// customDeploy deploys the host with a method of the host controller instead of an image. Exactly one
	// of image and customDeploy is set.
	// +optional
	CustomDeploy *CustomDeploy `json:"customDeploy,omitempty"`

	// hostSelector chooses the BareMetalHosts of the machine's namespace it may claim. Empty matches every host.
	// +optional
	HostSelector HostSelector `json:"hostSelector,omitempty"`

	// automatedCleaningMode is written to the claimed host's spec.automatedCleaningMode: metadata wipes
	// partition tables when the host is deprovisioned, disabled keeps the disks as they are. Empty keeps
	// the host's own setting.
	// +optional
	AutomatedCleaningMode AutomatedCleaningMode `json:"automatedCleaningMode,omitempty"`
}

// YonderMetalMachineInitializationStatus is the CAPI v1beta2 initialization contract.
type YonderMetalMachineInitializationStatus struct {
	// provisioned is true once the host reports "provisioned" and spec.providerID is set.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// YonderMetalMachineStatus is the observed state. It is rebuilt from the claimed host (whose name is
// also in the annotation metal.infrastructure.yonder.dev/host), so clusterctl move loses nothing.
type YonderMetalMachineStatus struct {
	// initialization reports provisioning to Cluster API.
	// +optional
	Initialization YonderMetalMachineInitializationStatus `json:"initialization,omitempty,omitzero"`
	// hostRef is the claimed BareMetalHost's name.
	// +optional
	HostRef string `json:"hostRef,omitempty"`
	// hostState is the claimed host's provisioning state as last seen.
	// +optional
	HostState string `json:"hostState,omitempty"`
	// addresses of the host, from its inspected NICs.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`
	// conditions: HostClaimed, HostProvisioned, HostReleased, Ready, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalmachines,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.hostRef"
// +kubebuilder:printcolumn:name="HostState",type="string",JSONPath=".status.hostState"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalMachine is the infrastructure of one Machine: a claimed Metal3 BareMetalHost.
type YonderMetalMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the machine.
	// +optional
	Spec YonderMetalMachineSpec `json:"spec,omitempty"`
	// status of the machine.
	// +optional
	Status YonderMetalMachineStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (m *YonderMetalMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions.
func (m *YonderMetalMachine) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// +kubebuilder:object:root=true

// YonderMetalMachineList is a list of YonderMetalMachines.
type YonderMetalMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the machines.
	Items []YonderMetalMachine `json:"items"`
}

// YonderMetalMachineTemplateResource is the template's machine.
type YonderMetalMachineTemplateResource struct {
	// metadata is copied to the machines.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the machines.
	// +required
	Spec YonderMetalMachineSpec `json:"spec"`
}

// YonderMetalMachineTemplateSpec is the template's spec.
type YonderMetalMachineTemplateSpec struct {
	// template of the machines.
	// +required
	Template YonderMetalMachineTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=yondermetalmachinetemplates,scope=Namespaced,categories=cluster-api;yonder
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// YonderMetalMachineTemplate is the template MachineDeployments and MachineSets clone YonderMetalMachines from.
type YonderMetalMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec YonderMetalMachineTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// YonderMetalMachineTemplateList is a list of YonderMetalMachineTemplates.
type YonderMetalMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the templates.
	Items []YonderMetalMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &YonderMetalMachine{}, &YonderMetalMachineList{}, &YonderMetalMachineTemplate{}, &YonderMetalMachineTemplateList{})
}
