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
	// ConsumerUIDLabel is set on a claimed YonderSSHHost to the claim identity of the YonderSSHMachine
	// that claims it (see ClaimIDAnnotation), next to spec.consumerRef, so claims can be listed by label
	// selector.
	ConsumerUIDLabel = "ssh.infrastructure.yonder.dev/consumer-uid"
	// HostAnnotation is set on a YonderSSHMachine to the name of the YonderSSHHost it has claimed. It is
	// written only after the claim is recorded on the host; the host's spec.consumerRef is the truth.
	HostAnnotation = "ssh.infrastructure.yonder.dev/host"
	// ReservedHostAnnotation records, on a YonderSSHMachine and with optimistic concurrency, the host it
	// is about to claim. Of several controller replicas racing for one Machine only one can record a
	// choice, so a Machine never ends up holding two hosts; a crash between the reservation and the claim
	// resumes with the same host. It is removed once the claim is recorded.
	ReservedHostAnnotation = "ssh.infrastructure.yonder.dev/reserved-host"
	// ClaimIDAnnotation records the identity a YonderSSHMachine claims its host and runs its bootstrap
	// under: its UID when it first reserved a host. `clusterctl move` recreates the object with a new UID
	// but keeps annotations, so the moved Machine still recognises its claim (the host's
	// spec.consumerRef.uid) and the run record on the host, instead of seeing a lost claim or
	// bootstrapping a provisioned host again. Written by the controller only.
	ClaimIDAnnotation = "ssh.infrastructure.yonder.dev/claim-id"
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
	// CredentialsLabel marks a Secret that a YonderSSHHost (or its bastion) names as its SSH credentials.
	// The host controller sets it, with clusterctl's move label, when it probes the host; the machine
	// controller watches the Secrets so labelled (and no other Secret) to read credentials without a
	// request to the API server per connection, and sees a rotated key as soon as it is written.
	CredentialsLabel = "ssh.infrastructure.yonder.dev/credentials" //nolint:gosec // a label key, not a credential
	// GPUCountLabel is the number of GPUs (NVIDIA, AMD, Intel) the last probe found on a YonderSSHHost, set
	// on hosts with at least one. A hostSelector cannot read status, so this label is how a
	// MachineDeployment asks for (Exists, In) or avoids (DoesNotExist) hosts with GPUs. The host controller
	// owns it: every successful probe sets or removes it.
	GPUCountLabel = "ssh.infrastructure.yonder.dev/gpu-count"
	// GPUVendorLabel is the vendor of the host's GPUs (nvidia, amd, intel) when they all have the same one;
	// absent otherwise. Owned like GPUCountLabel.
	GPUVendorLabel = "ssh.infrastructure.yonder.dev/gpu-vendor"
)
