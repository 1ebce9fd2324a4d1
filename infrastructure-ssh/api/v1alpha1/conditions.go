package v1alpha1

// YonderSSHMachine conditions and reasons. Waiting for the Cluster's infrastructure or for bootstrap
// data, and deleting, report CAPI's standard reasons (clusterv1.WaitingForClusterInfrastructureReadyReason,
// clusterv1.WaitingForBootstrapDataReason, clusterv1.DeletingReason).
const (
	// YonderSSHMachineHostClaimedCondition is true once a YonderSSHHost is claimed for the machine.
	YonderSSHMachineHostClaimedCondition = "HostClaimed"
	// YonderSSHMachineBootstrapExecutedCondition is true once the bootstrap data ran on the host and
	// wrote the sentinel /run/cluster-api/bootstrap-success.complete.
	YonderSSHMachineBootstrapExecutedCondition = "BootstrapExecuted"
	// YonderSSHMachineHostCleanedCondition reports cleanup of the host during deletion.
	YonderSSHMachineHostCleanedCondition = "HostCleaned"

	// YonderSSHMachineNoHostAvailableReason: no free YonderSSHHost matches spec.hostSelector (and the
	// failure domain).
	YonderSSHMachineNoHostAvailableReason = "NoHostAvailable"
	// YonderSSHMachineInvalidHostSelectorReason: spec.hostSelector is not a valid label selector (the
	// webhook normally rejects this).
	YonderSSHMachineInvalidHostSelectorReason = "InvalidHostSelector"
	// YonderSSHMachineHostClaimedReason: the host is claimed.
	YonderSSHMachineHostClaimedReason = "HostClaimed"
	// YonderSSHMachineHostDeletedReason: the claimed host disappeared or no longer names the machine.
	YonderSSHMachineHostDeletedReason = "HostDeleted"
	// YonderSSHMachineBootstrapRunningReason: the bootstrap data is running on the host.
	YonderSSHMachineBootstrapRunningReason = "BootstrapRunning"
	// YonderSSHMachineBootstrapSucceededReason: the bootstrap finished and wrote the sentinel.
	YonderSSHMachineBootstrapSucceededReason = "BootstrapSucceeded"
	// YonderSSHMachineBootstrapFailedReason: the bootstrap exited without writing the sentinel, or timed
	// out.
	YonderSSHMachineBootstrapFailedReason = "BootstrapFailed"
	// YonderSSHMachineBootstrapDataUnsupportedReason: the bootstrap data uses cloud-init features this
	// provider does not execute, or is not cloud-init.
	YonderSSHMachineBootstrapDataUnsupportedReason = "BootstrapDataUnsupported"
	// YonderSSHMachineSSHUnreachableReason: no SSH connection could be opened, or it broke.
	YonderSSHMachineSSHUnreachableReason = SSHUnreachableReason
	// YonderSSHMachineCleanupFailedReason: cleanup failed; retries are exhausted or still going.
	YonderSSHMachineCleanupFailedReason = "CleanupFailed"
	// YonderSSHMachineCleanupSkippedReason: an operator released the host without cleanup.
	YonderSSHMachineCleanupSkippedReason = "CleanupSkipped"
	// YonderSSHMachineCleanedReason: cleanup succeeded.
	YonderSSHMachineCleanedReason = "Cleaned"
)

// Reasons of a failed SSH connection, reported by the YonderSSHMachine and YonderSSHHost conditions
// that need one.
const (
	// HostKeyMismatchReason: the host presented a host key other than the pinned one.
	HostKeyMismatchReason = "HostKeyMismatch"
	// HostKeyUnknownReason: the host has no pinned host key yet (trust-on-first-use not done).
	HostKeyUnknownReason = "HostKeyUnknown"
	// SSHAuthFailedReason: the host refused the credentials.
	SSHAuthFailedReason = "SSHAuthFailed"
	// SSHUnreachableReason: no SSH connection could be opened.
	SSHUnreachableReason = "SSHUnreachable"
	// CredentialsInvalidReason: the credentials Secret is missing or holds no usable private key.
	CredentialsInvalidReason = "CredentialsInvalid"
)

// YonderSSHHost conditions and reasons.
const (
	// YonderSSHHostReachableCondition reports the last SSH probe of the host.
	YonderSSHHostReachableCondition = "Reachable"
	// YonderSSHHostProbedReason: the probe succeeded and facts were refreshed.
	YonderSSHHostProbedReason = "Probed"
	// YonderSSHHostDeletionBlockedReason: the host is being deleted but still claimed (Ready=False).
	YonderSSHHostDeletionBlockedReason = "DeletionBlocked"
)

// YonderSSHCluster reasons (of its Ready condition).
const (
	// YonderSSHClusterFailureDomainsReadyReason: failure domains were computed from the inventory.
	YonderSSHClusterFailureDomainsReadyReason = "FailureDomainsComputed"
	// YonderSSHClusterInvalidHostSelectorReason: spec.hostSelector is not a valid label selector.
	YonderSSHClusterInvalidHostSelectorReason = "InvalidHostSelector"
)
