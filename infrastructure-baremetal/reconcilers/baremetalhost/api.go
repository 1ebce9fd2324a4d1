package baremetalhost

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

// Labels and annotations this controller reads and writes on BareMetalHosts. Everything the controller
// must remember across a restart or a clusterctl move (which drops status) lives in annotations.
const (
	// ManagedLabel opts a BareMetalHost in: Yonder reconciles only hosts labelled
	// metal.yonder.dev/managed=true, so a Metal3 baremetal-operator can own every other host of the cluster.
	ManagedLabel = "metal.yonder.dev/managed"
	// Finalizer keeps a host until it is powered off and forgotten by the boot services.
	Finalizer = "metal.yonder.dev/baremetalhost"
	// CertPinAnnotation is the hex SHA-256 of the BMC's TLS certificate, recorded on first contact and
	// enforced afterwards. Remove it to accept a legitimately replaced certificate.
	CertPinAnnotation = "metal.yonder.dev/bmc-cert-sha256"
	// StateAnnotation is the host's durable state (JSON, see HostState): provisioning state, provisioned
	// image and provisioning progress. Status is rebuilt from it after clusterctl move.
	StateAnnotation = "metal.yonder.dev/state"
	// EnrolmentAnnotation is the host's pinned TPM (JSON attest.Enrolment).
	EnrolmentAnnotation = "metal.yonder.dev/tpm-enrolment"
	// EnrolmentWindowAnnotation is an RFC 3339 deadline until which the host's next attested boot may pin
	// its TPM (trust on first use, bounded). Nothing opens it automatically: an operator does, with
	// `kubectl yonder host enrol <host> --for 30m` or `kubectl annotate`, and the first enrolment removes
	// it. A window whose deadline passed is closed.
	EnrolmentWindowAnnotation = "metal.yonder.dev/tpm-enrolment-window"
	// EKFingerprintAnnotation registers the host's TPM out of band: the hex SHA-256 of its EK public key
	// in PKIX DER form (attest.EKFingerprint). The first attested boot whose EK has this fingerprint pins
	// the TPM without a window; any other EK is refused (EKMismatch).
	EKFingerprintAnnotation = "metal.yonder.dev/tpm-ek-sha256"
	// AttestationAnnotation is the latest attestation outcome reported by the boot server (JSON
	// AttestationRecord); written by the boot server's store, read by the reconciler.
	AttestationAnnotation = "metal.yonder.dev/attestation"
	// UnattributedRefusalAnnotation is the latest refusal with a fatal reason (EKMismatch, PCRMismatch, …)
	// of an attestation session that is not proven to be the host's own (JSON AttestationRecord with its
	// From): it did not come from the address Yonder's DHCP server leases to the host (proxyDHCP, or a
	// host without BootAddressAnnotation), so anyone on the boot LAN may have opened it. Written by the
	// boot server's store beside AttestationAnnotation, never over it (a stranger cannot replace the
	// host's own outcome), and never acted on as a failure: the attempt goes on, and its timeout names it.
	UnattributedRefusalAnnotation = "metal.yonder.dev/unattributed-attestation-refusal"
	// ReportTokenAnnotation is the hex SHA-256 of the report token released to the host inside its
	// instructions (write an image, clean the disks); ReportAnnotation is the report the ramdisk sent with
	// it (JSON ReportRecord). The token is consumed by its report.
	ReportTokenAnnotation = "metal.yonder.dev/report-token-sha256" //nolint:gosec // a digest's annotation name, not a credential
	ReportAnnotation      = "metal.yonder.dev/provisioning-report"
	// BootAddressAnnotation is the IPv4 address the DHCP server reserves for the host's boot NIC (when
	// Yonder serves DHCP; unused behind another DHCP server in proxy mode).
	BootAddressAnnotation = "metal.yonder.dev/boot-address"
	// GPUsAnnotation lists the GPUs inspection found (JSON); Metal3's HardwareDetails has no GPU field.
	GPUsAnnotation = "metal.yonder.dev/gpus"
	// GPUCountLabel is the number of GPUs inspection found, set on hosts with at least one. Label selectors
	// (YonderMetalMachine.spec.hostSelector) cannot read status or annotations, so this label is how a
	// MachineDeployment asks for (Exists, In) or avoids (DoesNotExist) hosts with GPUs. The controller owns it:
	// every inspection sets or removes it.
	GPUCountLabel = "metal.yonder.dev/gpu-count"
	// GPUVendorLabel is the GPUs' vendor (nvidia, amd, intel, or the BMC's manufacturer string made a label
	// value) when every GPU of the host has the same one; absent otherwise. Owned like GPUCountLabel.
	GPUVendorLabel = "metal.yonder.dev/gpu-vendor"
)

// Condition types on BareMetalHost.status.conditions.
const (
	// BareMetalHostBMCAccessibleCondition: the BMC answered with the Secret's credentials and the pinned certificate.
	BareMetalHostBMCAccessibleCondition = "BMCAccessible"
	// BareMetalHostSpecSupportedCondition: every field set in spec is one Yonder honours.
	BareMetalHostSpecSupportedCondition = "SpecSupported"
	// BareMetalHostInspectedCondition: status.hardware holds the Redfish inventory.
	BareMetalHostInspectedCondition = "Inspected"
	// BareMetalHostProvisionedCondition: the host booted the provisioning image, attested and received its data.
	BareMetalHostProvisionedCondition = "Provisioned"
	// BareMetalHostAttestedCondition: the latest attestation outcome.
	BareMetalHostAttestedCondition = "Attested"
	// BareMetalHostEKTrustCondition: whether the boot server verifies TPM EK certificates against vendor
	// roots (False with reason InsecureAcceptAnyEK when it accepts any EK).
	BareMetalHostEKTrustCondition = "EKCertificatesVerified"
	// BareMetalHostBootDataSignedCondition: whether the boot server signs the bootstrap data it releases
	// (False with reason InsecureUnsignedBootData when it runs without a signing key).
	BareMetalHostBootDataSignedCondition = "BootDataSigned"
	// BareMetalHostBootMACUniqueCondition: no other managed host, in any namespace, has this boot MAC.
	BareMetalHostBootMACUniqueCondition = "BootMACUnique"
)

// Condition reasons (of the conditions above).
const (
	BareMetalHostRegisteredReason          = "Registered"
	BareMetalHostInvalidAddressReason      = "InvalidBMCAddress"
	BareMetalHostCredentialsMissingReason  = "CredentialsSecretMissing"
	BareMetalHostCredentialsRejectedReason = "CredentialsRejected"
	BareMetalHostCertificateChangedReason  = "BMCCertificateChanged"
	BareMetalHostBMCUnreachableReason      = "BMCUnreachable"
	BareMetalHostSupportedReason           = "Supported"
	BareMetalHostUnsupportedFieldsReason   = "UnsupportedFields"
	BareMetalHostInventoryReadReason       = "InventoryRead"
	BareMetalHostInspectionFailedReason    = "InspectionFailed"
	BareMetalHostInspectionDisabledReason  = "InspectionDisabled"
	BareMetalHostWaitingForPXEBootReason   = "WaitingForPXEBoot"
	BareMetalHostPXEBootTimeoutReason      = "PXEBootTimeout"
	BareMetalHostAttestationFailedReason   = "AttestationFailed"
	BareMetalHostUserDataMissingReason     = "UserDataMissing"
	BareMetalHostPowerFailedReason         = "PowerActionFailed"
	BareMetalHostProvisionedReason         = "Provisioned"
	BareMetalHostNotProvisionedReason      = "NotProvisioned"
	// BareMetalHostWritingImageReason: the ramdisk attested and received its instructions, and is writing
	// the image to the root disk; BareMetalHostImageWriteFailedReason: it reported that it could not.
	BareMetalHostWritingImageReason     = "WritingImage"
	BareMetalHostImageWriteFailedReason = "ImageWriteFailed"
	// BareMetalHostStartingNodeReason: a diskless host (customDeploy yonder-diskless) attested and received
	// its instructions, and its ramdisk runs the agent's bootstrap to join the Node from memory;
	// BareMetalHostNodeStartFailedReason: it reported that the bootstrap failed, or did not report in time.
	BareMetalHostStartingNodeReason    = "StartingNode"
	BareMetalHostNodeStartFailedReason = "NodeStartFailed"
	// BareMetalHostFetchingLiveISOReason: the boot server is downloading and verifying a live ISO (format
	// live-iso) before the host is booted; BareMetalHostLiveISOUnavailableReason: it could not (the URL
	// failed, or the ISO does not match its checksum), and retries with backoff.
	BareMetalHostFetchingLiveISOReason    = "FetchingLiveISO"
	BareMetalHostLiveISOUnavailableReason = "LiveISOUnavailable"
	// BareMetalHostCleaningReason: the host PXE-booted its ramdisk to clean its disks before it is released.
	BareMetalHostCleaningReason       = "CleaningDisks"
	BareMetalHostCleaningFailedReason = "CleaningFailed"
	// BareMetalHostAttestationRefusedReason: the boot server refused a request of the host without
	// evidence against it (malformed request, closed enrolment window, no EK roots); the attempt goes on
	// to its timeout and retry, the host is not powered off.
	BareMetalHostAttestationRefusedReason       = "AttestationRefused"
	BareMetalHostDuplicateBootMACReason         = "DuplicateBootMAC"
	BareMetalHostBootMACUniqueReason            = "Unique"
	BareMetalHostEKRootsConfiguredReason        = "VendorRootsConfigured"
	BareMetalHostInsecureAcceptAnyEKReason      = "InsecureAcceptAnyEK"
	BareMetalHostSigningKeyConfiguredReason     = "SigningKeyConfigured"
	BareMetalHostInsecureUnsignedBootDataReason = "InsecureUnsignedBootData"
)

// HostState is the durable part of a host's state, kept in StateAnnotation.
type HostState struct {
	// State is the Metal3 provisioning state.
	State metal3v1.ProvisioningState `json:"state"`
	// Image is the image the host was provisioned with (status.provisioning.image).
	Image *metal3v1.Image `json:"image,omitempty"`
	// CustomDeploy is the custom deploy the host was provisioned with instead of an image
	// (status.provisioning.customDeploy): only yonder-diskless.
	CustomDeploy *metal3v1.CustomDeploy `json:"customDeploy,omitempty"`
	// BootRequestedAt is when the controller recorded the current provisioning attempt, just before it
	// armed the one-time PXE boot and powered the host (see BootSentAt); nil before, so a restarted
	// controller never cycles a host twice for one attempt.
	BootRequestedAt *metav1.Time `json:"bootRequestedAt,omitempty"`
	// BootSentAt is when the BMC accepted the power action of the current attempt's boot. A restarted
	// controller that finds BootRequestedAt without it knows its predecessor stopped between recording
	// the attempt and powering the host; if the BMC reports the host off, that boot never happened and
	// is requested again as the same attempt.
	BootSentAt *metav1.Time `json:"bootSentAt,omitempty"`
	// Attempt counts provisioning boots of the current image (retries after timeouts).
	Attempt int `json:"attempt,omitempty"`
	// RetryAt is when a failed attempt is retried.
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
	// PhaseStartedAt is when the current state began (operation history, timeouts).
	PhaseStartedAt *metav1.Time `json:"phaseStartedAt,omitempty"`
	// DisksWritten is set when a disk image's provisioning attempt starts: from then on the host's disks
	// may hold what Yonder wrote, which metadata cleaning removes when the host is deprovisioned.
	DisksWritten bool `json:"disksWritten,omitempty"`
	// CleanRequestedAt, CleanSentAt and CleanAttempt are BootRequestedAt, BootSentAt and Attempt of the
	// cleaning boot (deprovisioning with automatedCleaningMode metadata).
	CleanRequestedAt *metav1.Time `json:"cleanRequestedAt,omitempty"`
	CleanSentAt      *metav1.Time `json:"cleanSentAt,omitempty"`
	CleanAttempt     int          `json:"cleanAttempt,omitempty"`
}

// ReportRecord is the provisioning ramdisk's report of its work (wire.Report), as recorded on the host.
type ReportRecord struct {
	At       metav1.Time `json:"at"`
	Action   string      `json:"action"`
	Success  bool        `json:"success"`
	Message  string      `json:"message,omitempty"`
	Device   string      `json:"device,omitempty"`
	Bytes    int64       `json:"bytes,omitempty"`
	Duration string      `json:"duration,omitempty"`
}

func readReport(h *metal3v1.BareMetalHost) *ReportRecord {
	raw, ok := h.Annotations[ReportAnnotation]
	if !ok {
		return nil
	}
	var r ReportRecord
	if json.Unmarshal([]byte(raw), &r) != nil {
		return nil
	}
	return &r
}

// AttestationRecord is one outcome reported by the boot server.
type AttestationRecord struct {
	At      metav1.Time `json:"at"`
	Success bool        `json:"success"`
	Reason  string      `json:"reason"`
	Message string      `json:"message,omitempty"`
	// Fatal marks a refusal that is a real attestation failure (attest.Result.Fatal): only those power
	// the host off.
	Fatal bool `json:"fatal,omitempty"`
	// From is, in UnattributedRefusalAnnotation, the address the refused session came from.
	From string `json:"from,omitempty"`
}

func readState(h *metal3v1.BareMetalHost) (HostState, error) {
	var s HostState
	raw, ok := h.Annotations[StateAnnotation]
	if !ok {
		return s, nil
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return s, fmt.Errorf("failed to decode annotation %s: %w", StateAnnotation, err)
	}
	return s, nil
}

func writeState(h *metal3v1.BareMetalHost, s HostState) {
	raw, _ := json.Marshal(s)
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[StateAnnotation] = string(raw)
}

func readAttestation(h *metal3v1.BareMetalHost) *AttestationRecord {
	return readRecord(h, AttestationAnnotation)
}

// readUnattributed is the latest unattributed refusal recorded at or after since (nil: none).
func readUnattributed(h *metal3v1.BareMetalHost, since *metav1.Time) *AttestationRecord {
	rec := readRecord(h, UnattributedRefusalAnnotation)
	if rec == nil || since == nil || rec.At.Before(since) {
		return nil
	}
	return rec
}

func readRecord(h *metal3v1.BareMetalHost, annotation string) *AttestationRecord {
	raw, ok := h.Annotations[annotation]
	if !ok {
		return nil
	}
	var r AttestationRecord
	if json.Unmarshal([]byte(raw), &r) != nil {
		return nil
	}
	return &r
}

func now() *metav1.Time {
	t := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	return &t
}

// Annotation, condition and reasons of Metal3's annotations (annotations.go).
const (
	// RebootPowerOffAnnotation is the last power-off sent for reboot annotations (JSON PowerOffRecord),
	// written before it is sent: a pass that read an outdated host fails on that write instead of powering
	// the host off twice, and a soft power-off is forced once Reconciler.SoftPowerOffTimeout has passed
	// since it was sent, across restarts. Removed once the host is off.
	RebootPowerOffAnnotation = "metal.yonder.dev/reboot-power-off"
	// BareMetalHostRebootRequestedCondition: Metal3 reboot annotations (reboot.metal3.io[/<key>]) ask for
	// the host off; absent when none does.
	BareMetalHostRebootRequestedCondition = "RebootRequested"
	// BareMetalHostPoweringOffReason: the host is being powered off for them.
	BareMetalHostPoweringOffReason = "PoweringOff"
	// BareMetalHostPoweredOffByAnnotationReason: the host is off and kept off by reboot.metal3.io/<key>.
	BareMetalHostPoweredOffByAnnotationReason = "PoweredOffByAnnotation"
	// BareMetalHostPowerOffDisabledReason: keyed reboot annotations cannot hold off a host with
	// spec.disablePowerOff.
	BareMetalHostPowerOffDisabledReason = "PowerOffDisabled"
	// BareMetalHostHardwareDetailsAnnotationReason: status.hardware came from inspect.metal3.io/hardwaredetails;
	// BareMetalHostInvalidHardwareDetailsReason: that annotation could not be parsed.
	BareMetalHostHardwareDetailsAnnotationReason = "HardwareDetailsAnnotation"
	BareMetalHostInvalidHardwareDetailsReason    = "InvalidHardwareDetails"
)

// PowerOffRecord is a power-off sent for reboot annotations, as kept in RebootPowerOffAnnotation.
type PowerOffRecord struct {
	// Action is the Redfish reset type sent: GracefulShutdown (soft) or ForceOff (hard).
	Action string `json:"action"`
	// At is when it was sent.
	At metav1.Time `json:"at"`
}
