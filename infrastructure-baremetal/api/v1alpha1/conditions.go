package v1alpha1

// MachineFinalizer lets a YonderMetalMachine deprovision and release its BareMetalHost before it goes away.
const MachineFinalizer = "yondermetalmachine.infrastructure.cluster.x-k8s.io"

// Labels and annotations.
const (
	// HostAnnotation is set on a YonderMetalMachine to the name of the BareMetalHost it has claimed. It is
	// written only after the claim (the host's spec.consumerRef) is recorded; the host is the truth.
	HostAnnotation = "metal.infrastructure.yonder.dev/host"
	// ReservedHostAnnotation records, on a YonderMetalMachine and with optimistic concurrency, the host it
	// is about to claim. Of several controller replicas racing for one Machine only one can record a
	// choice, so a Machine never ends up holding two hosts; a crash between the reservation and the claim
	// resumes with the same host.
	ReservedHostAnnotation = "metal.infrastructure.yonder.dev/reserved-host"
	// FailureDomainLabel on a BareMetalHost names its failure domain (rack, room, site). Machines of a
	// Cluster are spread across the values; a Machine with spec.failureDomain prefers hosts with that value.
	FailureDomainLabel = "infrastructure.cluster.x-k8s.io/failure-domain"
)

// YonderMetalMachine conditions.
const (
	// HostClaimedCondition is true once a BareMetalHost's spec.consumerRef names the machine.
	HostClaimedCondition = "HostClaimed"
	// HostProvisionedCondition is true once the claimed host reports provisioning state "provisioned".
	HostProvisionedCondition = "HostProvisioned"
	// HostReleasedCondition reports deprovisioning and release of the host during deletion.
	HostReleasedCondition = "HostReleased"
)

// YonderMetalMachine condition reasons.
const (
	// WaitingForClusterInfrastructureReason: the Cluster's infrastructure is not provisioned yet.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	// NoHostAvailableReason: no BareMetalHost of the namespace is free, available, unpaused, healthy and
	// matching spec.hostSelector.
	NoHostAvailableReason = "NoHostAvailable"
	// InvalidHostSelectorReason: spec.hostSelector is not a valid label selector.
	InvalidHostSelectorReason = "InvalidHostSelector"
	// HostClaimedReason: the host is claimed.
	HostClaimedReason = "HostClaimed"
	// HostLostReason: the claimed host was deleted or its consumerRef no longer names this machine.
	HostLostReason = "HostLost"
	// WaitingForBootstrapDataReason: Machine.spec.bootstrap.dataSecretName is not set yet; the host is
	// claimed but no image or user data is handed to it before the bootstrap data exists.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// HostProvisioningReason: the image and user data are handed over; the host is provisioning.
	HostProvisioningReason = "HostProvisioning"
	// HostProvisionedReason: the host reports "provisioned".
	HostProvisionedReason = "HostProvisioned"
	// HostErrorReason: the host reports an error (status.errorType); the message carries its errorMessage.
	HostErrorReason = "HostError"
	// HostPausedReason: the host carries baremetalhost.metal3.io/paused; nothing happens until it is removed.
	HostPausedReason = "HostPaused"
	// DeprovisioningReason: the image is withdrawn; the host is being deprovisioned (cleaned) and powered off.
	DeprovisioningReason = "Deprovisioning"
	// ReleasedReason: the host is available again and its consumerRef is cleared.
	ReleasedReason = "Released"
)

// YonderMetalCluster condition reasons.
const (
	// FailureDomainsReadyReason: failure domains were computed from spec and the host inventory.
	FailureDomainsReadyReason = "FailureDomainsComputed"
)
