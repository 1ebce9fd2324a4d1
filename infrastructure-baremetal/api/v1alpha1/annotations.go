package v1alpha1

import "time"

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
	// resumes with the same host. It is removed once the claim is recorded.
	ReservedHostAnnotation = "metal.infrastructure.yonder.dev/reserved-host"
	// ClaimIDAnnotation records the identity a YonderMetalMachine claims its host under (the host's
	// spec.consumerRef.uid): its UID when it first reserved a host. `clusterctl move` recreates the object
	// with a new UID but keeps annotations, so the moved Machine still recognises its claim instead of
	// seeing a lost host. Written by the controller only.
	ClaimIDAnnotation = "metal.infrastructure.yonder.dev/claim-id"
	// ClusterLabel on a claimed BareMetalHost names the Cluster of its consumer, so spreading can count a
	// Cluster's hosts per failure domain without reading every Machine. (Not cluster.x-k8s.io/cluster-name:
	// the host is inventory and must not look like one of the Cluster's objects.)
	ClusterLabel = "metal.infrastructure.yonder.dev/cluster-name"
	// FailureDomainLabel on a BareMetalHost names its failure domain (rack, room, site). Machines of a
	// Cluster are spread across the values; a Machine with spec.failureDomain gets a host with that value.
	FailureDomainLabel = "infrastructure.cluster.x-k8s.io/failure-domain"
)

// MaxEnrolmentWindow is the longest a BareMetalHost's TPM enrolment window may be open: the deadline in
// its annotation metal.yonder.dev/tpm-enrolment-window is at most this far ahead when it is written. The
// provider's BareMetalHost webhook enforces it and `kubectl yonder host enrol --for` is bounded by it: a
// window is trust on first use, so it must not stay open for whoever boots first days later.
const MaxEnrolmentWindow = 24 * time.Hour
