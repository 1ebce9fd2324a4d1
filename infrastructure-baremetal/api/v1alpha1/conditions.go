package v1alpha1

// YonderMetalMachine conditions. Waiting for the Cluster's infrastructure or for bootstrap data, and
// deleting, report CAPI's standard reasons (clusterv1.WaitingForClusterInfrastructureReadyReason,
// clusterv1.WaitingForBootstrapDataReason, clusterv1.DeletingReason).
const (
	// YonderMetalMachineHostClaimedCondition is true once a BareMetalHost's spec.consumerRef names the
	// machine.
	YonderMetalMachineHostClaimedCondition = "HostClaimed"
	// YonderMetalMachineHostProvisionedCondition is true once the claimed host reports provisioning state
	// "provisioned".
	YonderMetalMachineHostProvisionedCondition = "HostProvisioned"
	// YonderMetalMachineHostReleasedCondition reports deprovisioning and release of the host during
	// deletion.
	YonderMetalMachineHostReleasedCondition = "HostReleased"
)

// YonderMetalMachine condition reasons.
const (
	// YonderMetalMachineNoHostAvailableReason: no BareMetalHost of the namespace is free, available,
	// unpaused, healthy and matching spec.hostSelector (and the failure domain).
	YonderMetalMachineNoHostAvailableReason = "NoHostAvailable"
	// YonderMetalMachineInvalidHostSelectorReason: spec.hostSelector is not a valid label selector.
	YonderMetalMachineInvalidHostSelectorReason = "InvalidHostSelector"
	// YonderMetalMachineHostClaimedReason: the host is claimed.
	YonderMetalMachineHostClaimedReason = "HostClaimed"
	// YonderMetalMachineHostLostReason: the claimed host was deleted or its consumerRef no longer names
	// this machine.
	YonderMetalMachineHostLostReason = "HostLost"
	// YonderMetalMachineHostProvisioningReason: the image and user data are handed over; the host is
	// provisioning.
	YonderMetalMachineHostProvisioningReason = "HostProvisioning"
	// YonderMetalMachineHostProvisionedReason: the host reports "provisioned".
	YonderMetalMachineHostProvisionedReason = "HostProvisioned"
	// YonderMetalMachineHostErrorReason: the host reports an error (status.errorType); the message carries
	// its errorMessage.
	YonderMetalMachineHostErrorReason = "HostError"
	// YonderMetalMachineBootstrapDataUnsupportedReason: the machine runs diskless (customDeploy
	// yonder-diskless), whose ramdisk runs Yonder's cloud-config itself, and its bootstrap data is not
	// that (a kubeadm cloud-config, another format): the host is handed nothing.
	YonderMetalMachineBootstrapDataUnsupportedReason = "BootstrapDataUnsupported"
	// YonderMetalMachineHostPausedReason: the host carries baremetalhost.metal3.io/paused; nothing happens
	// until it is removed.
	YonderMetalMachineHostPausedReason = "HostPaused"
	// YonderMetalMachineDeprovisioningReason: the image is withdrawn; the host is being deprovisioned
	// (cleaned) and powered off.
	YonderMetalMachineDeprovisioningReason = "Deprovisioning"
	// YonderMetalMachineReleasedReason: the host is available again and its consumerRef is cleared.
	YonderMetalMachineReleasedReason = "Released"
)

// YonderMetalCluster reasons (of its Ready condition).
const (
	// YonderMetalClusterFailureDomainsReadyReason: failure domains were computed from spec and the host
	// inventory.
	YonderMetalClusterFailureDomainsReadyReason = "FailureDomainsComputed"
	// YonderMetalClusterInvalidHostSelectorReason: spec.hostSelector is not a valid label selector.
	YonderMetalClusterInvalidHostSelectorReason = "InvalidHostSelector"
)
