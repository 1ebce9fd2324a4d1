package v1alpha1

// Finalizers.
const (
	// MachineFinalizer lets a YonderSSHMachine clean and release its host before it goes away.
	MachineFinalizer = "yondersshmachine.infrastructure.cluster.x-k8s.io"
	// HostFinalizer keeps a claimed YonderSSHHost from being deleted until its claim is released.
	HostFinalizer = "yondersshhost.infrastructure.cluster.x-k8s.io"
)

// Labels and annotations.
const (
	// ConsumerUIDLabel is set on a claimed YonderSSHHost to the UID of the YonderSSHMachine that claims it,
	// next to spec.consumerRef, so claims can be listed by label selector.
	ConsumerUIDLabel = "ssh.infrastructure.yonder.dev/consumer-uid"
	// HostAnnotation is set on a YonderSSHMachine to the name of the YonderSSHHost it has claimed. It is
	// written only after the claim is recorded on the host; the host's spec.consumerRef is the truth.
	HostAnnotation = "ssh.infrastructure.yonder.dev/host"
	// ReservedHostAnnotation records, on a YonderSSHMachine and with optimistic concurrency, the host it
	// is about to claim. Of several controller replicas racing for one Machine only one can record a
	// choice, so a Machine never ends up holding two hosts; a crash between the reservation and the claim
	// resumes with the same host.
	ReservedHostAnnotation = "ssh.infrastructure.yonder.dev/reserved-host"
	// SkipCleanupAnnotation, set by an operator on a deleting YonderSSHMachine whose host cannot be
	// cleaned (unreachable, host key changed), releases the host WITHOUT cleanup. The host is then
	// marked with NeedsCleanupAnnotation and is not claimed again until an operator removes that.
	SkipCleanupAnnotation = "ssh.infrastructure.yonder.dev/skip-cleanup"
	// RetryCleanupAnnotation, set by an operator on a deleting YonderSSHMachine whose cleanup retries
	// are exhausted, starts a new round of cleanup attempts; the controller removes it.
	RetryCleanupAnnotation = "ssh.infrastructure.yonder.dev/retry-cleanup"
	// NeedsCleanupAnnotation marks a YonderSSHHost released without cleanup; its value names the
	// YonderSSHMachine that had it. Remove it once the host is clean to return the host to the pool.
	NeedsCleanupAnnotation = "ssh.infrastructure.yonder.dev/needs-cleanup"
)

// YonderSSHMachine conditions and reasons.
const (
	// HostClaimedCondition is true once a YonderSSHHost is claimed for the machine.
	HostClaimedCondition = "HostClaimed"
	// BootstrapExecutedCondition is true once the bootstrap data ran on the host and wrote the sentinel
	// /run/cluster-api/bootstrap-success.complete.
	BootstrapExecutedCondition = "BootstrapExecuted"
	// HostCleanedCondition reports cleanup of the host during deletion.
	HostCleanedCondition = "HostCleaned"

	// NoHostAvailableReason: no free YonderSSHHost matches spec.hostSelector (and the failure domain).
	NoHostAvailableReason = "NoHostAvailable"
	// HostClaimedReason: the host is claimed.
	HostClaimedReason = "HostClaimed"
	// HostDeletedReason: the claimed host disappeared.
	HostDeletedReason = "HostDeleted"
	// WaitingForBootstrapDataReason: Machine.spec.bootstrap.dataSecretName is not set yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// BootstrapRunningReason: the bootstrap data is running on the host.
	BootstrapRunningReason = "BootstrapRunning"
	// BootstrapSucceededReason: the bootstrap finished and wrote the sentinel.
	BootstrapSucceededReason = "BootstrapSucceeded"
	// BootstrapFailedReason: the bootstrap exited without writing the sentinel, or timed out.
	BootstrapFailedReason = "BootstrapFailed"
	// BootstrapDataUnsupportedReason: the bootstrap data uses cloud-init features this provider does
	// not execute, or is not cloud-init.
	BootstrapDataUnsupportedReason = "BootstrapDataUnsupported"
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
	// CleanupFailedReason: cleanup failed; retries are exhausted or still going.
	CleanupFailedReason = "CleanupFailed"
	// CleanupSkippedReason: an operator released the host without cleanup.
	CleanupSkippedReason = "CleanupSkipped"
	// CleanedReason: cleanup succeeded.
	CleanedReason = "Cleaned"
	// DeletingReason: deletion in progress.
	DeletingReason = "Deleting"
)

// YonderSSHHost conditions and reasons.
const (
	// HostReachableCondition reports the last SSH probe of the host.
	HostReachableCondition = "Reachable"
	// HostProbedReason: the probe succeeded and facts were refreshed.
	HostProbedReason = "Probed"
)

// YonderSSHCluster conditions.
const (
	// FailureDomainsReadyReason: failure domains were computed from the inventory.
	FailureDomainsReadyReason = "FailureDomainsComputed"
)
