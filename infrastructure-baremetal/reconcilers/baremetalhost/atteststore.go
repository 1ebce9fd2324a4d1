package baremetalhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostdata"
)

// AttestStore is the attestation service's view of BareMetalHosts (attest.Store): the pinned TPM lives
// in EnrolmentAnnotation, bootstrap data is the Secret named by spec.userData, and outcomes are written
// to AttestationAnnotation, which the host reconciler acts on; unattributed refusals (attest.Result) go to
// UnattributedRefusalAnnotation and a Warning Event instead. Host names are "<namespace>/<name>".
type AttestStore struct {
	// Client writes hosts (and reads them when Reader is nil).
	Client client.Client
	// Reader reads hosts and user data Secrets uncached (the manager's API reader). The boot server acts on
	// a host moments after the controller wrote its provisioning status: a QEMU VM attests within seconds,
	// a real host within a minute, but a busy manager's cache may still show the host available, and a
	// release refused on that stale read would put a healthy host in error.
	Reader client.Reader
	// Recorder records the Warning Event of each unattributed refusal on its host (nil: none).
	Recorder record.EventRecorder
}

// reader is the uncached Reader when set, else the Client.
func (s AttestStore) reader() client.Reader {
	if s.Reader != nil {
		return s.Reader
	}
	return s.Client
}

var (
	_ attest.Store      = AttestStore{}
	_ attest.EKRegistry = AttestStore{}
)

func splitHost(host string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(host, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("host %q is not <namespace>/<name>", host)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

var errNotManaged = errors.New("not managed by Yonder")

func (s AttestStore) get(ctx context.Context, host string) (*metal3v1.BareMetalHost, error) {
	key, err := splitHost(host)
	if err != nil {
		return nil, err
	}
	h := &metal3v1.BareMetalHost{}
	if err := s.reader().Get(ctx, key, h); err != nil {
		return nil, fmt.Errorf("failed to get BareMetalHost %s: %w", host, err)
	}
	if h.Labels[ManagedLabel] != "true" {
		return nil, fmt.Errorf("BareMetalHost %s is %w (label %s)", host, errNotManaged, ManagedLabel)
	}
	return h, nil
}

// Enrolment implements attest.Store.
func (s AttestStore) Enrolment(ctx context.Context, host string) (*attest.Enrolment, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return nil, err
	}
	raw, ok := h.Annotations[EnrolmentAnnotation]
	if !ok {
		return nil, nil
	}
	e := &attest.Enrolment{}
	if err := json.Unmarshal([]byte(raw), e); err != nil {
		return nil, fmt.Errorf("failed to decode annotation %s of %s: %w", EnrolmentAnnotation, host, err)
	}
	return e, nil
}

// RegisteredEK implements attest.EKRegistry: the fingerprint an operator registered in
// EKFingerprintAnnotation. The attestation service trusts that EK by its hash, so a TPM without an EK
// certificate whose EK it is attests even where vendor roots are configured.
func (s AttestStore) RegisteredEK(ctx context.Context, host string) (string, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(h.Annotations[EKFingerprintAnnotation]), nil
}

// Enrol implements attest.Store. Enrolment is explicit: the TPM is pinned only when its EK has the
// fingerprint registered in EKFingerprintAnnotation, or while an operator's enrolment window
// (EnrolmentWindowAnnotation, an RFC 3339 deadline) is open; the pin closes the window in the same update,
// so a second TPM can never be pinned by a later boot. A refusal is an *attest.RefusedError.
func (s AttestStore) Enrol(ctx context.Context, host string, e attest.Enrolment) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("failed to encode enrolment of %s: %w", host, err)
	}
	fp, err := attest.EKFingerprint(e.EKPublic)
	if err != nil {
		return &attest.RefusedError{Status: 400, Reason: wire.ReasonMalformedRequest, Message: err.Error()}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h, err := s.get(ctx, host)
		if err != nil {
			return err
		}
		if _, pinned := h.Annotations[EnrolmentAnnotation]; pinned {
			return fmt.Errorf("host %s already has a pinned TPM", host)
		}
		if rerr := enrolmentAllowed(h, fp, time.Now()); rerr != nil {
			return rerr
		}
		orig := h.DeepCopy()
		h.Annotations[EnrolmentAnnotation] = string(raw)
		delete(h.Annotations, EnrolmentWindowAnnotation)
		// The optimistic lock makes "window open" and "pin" one atomic step.
		if err := s.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Pinned host TPM", "BareMetalHost", host, "ekSHA256", fp)
		return nil
	})
}

// enrolmentAllowed is the explicit enrolment policy of a host without a pinned TPM whose EK has
// fingerprint fp: a registered fingerprint decides alone; otherwise a window must be open at now.
func enrolmentAllowed(h *metal3v1.BareMetalHost, fp string, now time.Time) *attest.RefusedError {
	if want, ok := h.Annotations[EKFingerprintAnnotation]; ok {
		if !strings.EqualFold(strings.TrimSpace(want), fp) {
			return &attest.RefusedError{Status: 403, Reason: wire.ReasonEKMismatch, Message: fmt.Sprintf(
				"the TPM's EK (sha256 %s) is not the one registered in annotation %s (%s)", fp, EKFingerprintAnnotation, want)}
		}
		return nil
	}
	raw, ok := h.Annotations[EnrolmentWindowAnnotation]
	if !ok {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"the host has no pinned TPM, no registered EK (annotation %s) and no enrolment window: run `kubectl yonder host enrol %s/%s --for 30m` "+
				"(annotation %s=<RFC 3339 deadline>) and provision again", EKFingerprintAnnotation, h.Namespace, h.Name, EnrolmentWindowAnnotation)}
	}
	deadline, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"annotation %s=%q is not an RFC 3339 deadline: the window is closed", EnrolmentWindowAnnotation, raw)}
	}
	if !now.Before(deadline) {
		return &attest.RefusedError{Status: 403, Reason: wire.ReasonEnrolmentClosed, Message: fmt.Sprintf(
			"the enrolment window closed at %s: open a new one to enrol this host's TPM", deadline.Format(time.RFC3339))}
	}
	return nil
}

// Instructions implements attest.Store: what the attested host is to do, by its provisioning state.
//   - provisioning a live-iso image: nothing (wire.ActionLive, no user data): the attested host is then
//     switched to SAN-boot its ISO;
//   - provisioning a disk image: write spec.image to the disk spec.rootDeviceHints chooses and add a config
//     drive with the user data, meta data and network data (wire.ActionWriteImage);
//   - provisioning customDeploy yonder-diskless: run the user data from the ramdisk, with the meta data
//     (its providerid) and network data, and report once the Node joined (wire.ActionRunNode);
//   - deprovisioning with automatedCleaningMode metadata: clean every disk (wire.ActionClean).
//
// The user data is the spec.userData Secret's "userData" key (what CAPM3 writes) or "value" (a CAPI
// bootstrap data Secret named directly). Actions that report get a fresh report token, whose digest is
// stored on the host before the instructions leave (ReportTokenAnnotation).
func (s AttestStore) Instructions(ctx context.Context, host string) ([]byte, error) {
	h, err := s.get(ctx, host)
	if err != nil {
		return nil, err
	}
	in := wire.Instructions{Version: wire.InstructionsVersion, Host: host}
	switch h.Status.Provisioning.State {
	case metal3v1.StateProvisioning:
		if liveBoot(h) {
			// The ramdisk only proves the host: the controller then boots it into its ISO, which (as in
			// Metal3) receives no user data, so none leaves the boot server.
			in.Action = wire.ActionLive
			break
		}
		if in.UserData, err = hostdata.SecretKey(ctx, s.reader(), h, h.Spec.UserData, "spec.userData", "userData", "value"); err != nil {
			return nil, err
		}
		if in.UserData == nil {
			return nil, fmt.Errorf("host %s has no spec.userData", host)
		}
		switch {
		case diskless(h):
			in.Action = wire.ActionRunNode
		case !hasImage(h):
			return nil, fmt.Errorf("host %s has no spec.image", host)
		default:
			in.Action = wire.ActionWriteImage
			in.Image, in.RootDeviceHints = h.Spec.Image.DeepCopy(), h.Spec.RootDeviceHints.DeepCopy()
		}
		if in.MetaData, err = s.metaData(ctx, h); err != nil {
			return nil, err
		}
		if in.NetworkData, err = s.networkData(ctx, h); err != nil {
			return nil, err
		}
	case metal3v1.StateDeprovisioning:
		in.Action = wire.ActionClean
	default:
		return nil, fmt.Errorf("host %s is %q, neither provisioning nor deprovisioning: nothing is released", host, h.Status.Provisioning.State)
	}
	if in.Action != wire.ActionLive {
		in.ReportToken = attest.NewReportToken()
		sum := sha256.Sum256([]byte(in.ReportToken))
		orig := h.DeepCopy()
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[ReportTokenAnnotation] = hex.EncodeToString(sum[:])
		delete(h.Annotations, ReportAnnotation)
		// A merge patch of these two annotations only: the controller writes the host at the same time.
		if err := s.Client.Patch(ctx, h, client.MergeFrom(orig)); err != nil {
			return nil, fmt.Errorf("failed to store the report token of %s: %w", host, err)
		}
	}
	return json.Marshal(in)
}

// liveBoot reports whether the host is to boot its spec.image as a live ISO (format live-iso, no custom
// deploy method).
func liveBoot(h *metal3v1.BareMetalHost) bool { return !diskless(h) && isLiveImage(h.Spec.Image) }

// isLiveImage reports whether an image is booted rather than written to disk (format live-iso).
func isLiveImage(img *metal3v1.Image) bool {
	return img != nil && img.DiskFormat != nil && *img.DiskFormat == string(infrav1.LiveISOFormat)
}

// hasImage reports whether the host's spec names an image.
func hasImage(h *metal3v1.BareMetalHost) bool { return h.Spec.Image != nil && h.Spec.Image.URL != "" }

// diskless reports whether the host is to run its Node from its ramdisk (customDeploy yonder-diskless):
// nothing is written to its disks.
func diskless(h *metal3v1.BareMetalHost) bool {
	return h.Spec.CustomDeploy != nil && h.Spec.CustomDeploy.Method == infrav1.DisklessDeployMethod
}

// deploys reports whether the host's spec asks for a deployment Yonder carries out: an image, or the
// diskless method.
func deploys(h *metal3v1.BareMetalHost) bool { return hasImage(h) || diskless(h) }

// metaData is the config drive's meta_data.json, as Metal3's operator builds it for Ironic: the host's
// identity (uuid, metal3-namespace, metal3-name, name, and its name as local-hostname/hostname), with the
// keys of the spec.metaData Secret's "metaData" (YAML or JSON map, CAPM3's Metal3Data) on top. Yonder adds
// "providerid", the providerID a YonderMetalMachine on this host gets (yonder-metal://<namespace>/<host>):
// the bootstrap data is rendered before the host is known, so yonder-agent takes the Node's providerID from
// here (cloud-init's ds.meta_data.providerid); CAPM3's Metal3Data sets its own providerid, which wins.
func (s AttestStore) metaData(ctx context.Context, h *metal3v1.BareMetalHost) (json.RawMessage, error) {
	md := map[string]any{
		"uuid": string(h.UID), "metal3-namespace": h.Namespace, "metal3-name": h.Name, "name": h.Name,
		"local-hostname": h.Name, "local_hostname": h.Name, "hostname": h.Name,
		"providerid": infrav1.ProviderID(h.Namespace, h.Name),
	}
	extra, err := hostdata.MetaData(ctx, s.reader(), h)
	if err != nil {
		return nil, err
	}
	maps.Copy(md, extra)
	return json.Marshal(md)
}

// networkData is the config drive's network_data.json: the spec.networkData Secret's "networkData" (YAML
// or JSON, OpenStack's network_data format as CAPM3 renders it); nil when the host names none.
func (s AttestStore) networkData(ctx context.Context, h *metal3v1.BareMetalHost) (json.RawMessage, error) {
	return hostdata.NetworkData(ctx, s.reader(), h)
}

// Report implements attest.Store: a report with the token released to the host is recorded on it
// (ReportAnnotation) and consumes the token, in one update.
func (s AttestStore) Report(ctx context.Context, r wire.Report) error {
	unknown := &attest.RefusedError{Status: 403, Reason: wire.ReasonUnknownReportToken, Message: "no report is expected from this host with this token"}
	sum := sha256.Sum256([]byte(r.Token))
	rec := ReportRecord{At: *now(), Action: r.Action, Success: r.Success, Message: r.Message, Device: r.Device, Bytes: r.Bytes, Duration: r.Duration}
	raw, _ := json.Marshal(rec)
	if _, err := splitHost(r.Host); err != nil {
		return unknown
	}
	return retry.RetryOnConflict(recordBackoff, func() error {
		h, err := s.get(ctx, r.Host)
		if apierrors.IsNotFound(err) || errors.Is(err, errNotManaged) {
			return unknown
		}
		if err != nil {
			return err
		}
		want, err := hex.DecodeString(h.Annotations[ReportTokenAnnotation])
		if err != nil || len(want) != sha256.Size || subtle.ConstantTimeCompare(want, sum[:]) != 1 {
			return unknown
		}
		orig := h.DeepCopy()
		delete(h.Annotations, ReportTokenAnnotation)
		h.Annotations[ReportAnnotation] = string(raw)
		if err := s.Client.Patch(ctx, h, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Recorded provisioning report", "BareMetalHost", r.Host, "action", r.Action, "success", r.Success)
		return nil
	})
}

// recordBootAddress writes the address the attested host used into its inventory, as Metal3's inspection
// records the ramdisk's leases: the boot NIC's IP (a NIC entry for the boot MAC is added when the BMC's
// inventory listed none), and the host's name as its hostname when inspection found none. Redfish rarely
// reports a host NIC's IP, and the Machine's addresses are read from here.
func recordBootAddress(h *metal3v1.BareMetalHost, addr netip.Addr) {
	if h.Status.HardwareDetails == nil {
		h.Status.HardwareDetails = &metal3v1.HardwareDetails{}
	}
	hw := h.Status.HardwareDetails
	if hw.Hostname == "" {
		hw.Hostname = h.Name
	}
	mac, err := net.ParseMAC(h.Spec.BootMACAddress)
	if err != nil {
		return
	}
	for i := range hw.NIC {
		if m, err := net.ParseMAC(hw.NIC[i].MAC); err == nil && bytes.Equal(m, mac) {
			hw.NIC[i].IP = addr.String()
			return
		}
	}
	hw.NIC = append(hw.NIC, metal3v1.NIC{Name: "boot", MAC: mac.String(), IP: addr.String(), PXE: true})
}

// recordBackoff spaces Record's retries. The host reconciler answers the annotation with its own status
// write at once, so Record's status patch conflicts often on a busy manager; a few seconds of retries
// keep the Attested condition from being dropped.
var recordBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}

// Record implements attest.Store: the outcome lands on the host (annotation and Attested condition). An
// unattributed refusal lands in an annotation of its own, with a Warning Event, and changes neither the
// host's outcome nor its Attested condition (recordUnattributed).
func (s AttestStore) Record(ctx context.Context, host string, r attest.Result) {
	if r.Unattributed {
		s.recordUnattributed(ctx, host, r)
		return
	}
	rec := AttestationRecord{At: *now(), Success: r.Success, Reason: r.Reason, Message: r.Message, Fatal: r.Fatal}
	raw, _ := json.Marshal(rec)
	afterRelease := false
	err := retry.RetryOnConflict(recordBackoff, func() error {
		h, err := s.get(ctx, host)
		if err != nil {
			return err
		}
		// The host has its data for this attempt (each attempt starts without an outcome): a refusal now
		// is another session's — a stranger's with a ticket it took earlier, or a refetch — and must not
		// replace the release the controller acts on.
		if cur := readRecord(h, AttestationAnnotation); !r.Success && cur != nil && cur.Success && cur.Reason == attest.ReasonReleased {
			afterRelease = true
			return nil
		}
		orig := h.DeepCopy()
		h.Annotations[AttestationAnnotation] = string(raw)
		// The response is the host as stored, status included: the base of the status patch below.
		if err := s.Client.Patch(ctx, h, client.MergeFrom(orig)); err != nil {
			return err
		}
		origStatus := h.DeepCopy()
		status := metav1.ConditionTrue
		if !r.Success {
			status = metav1.ConditionFalse
		}
		setConditionRaw(h, metav1.Condition{Type: BareMetalHostAttestedCondition, Status: status, Reason: r.Reason, Message: r.Message})
		if r.Success && r.Address.IsValid() {
			recordBootAddress(h, r.Address)
		}
		// A merge patch replaces the whole conditions list. The host reconciler acts on the annotation
		// written above and may set Provisioned=True in between; without the optimistic lock this patch
		// would write the older list back (state provisioned, Provisioned condition False, for good).
		return s.Client.Status().Patch(ctx, h, client.MergeFromWithOptions(origStatus, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to record attestation outcome", "BareMetalHost", host, "reason", r.Reason)
	}
	if afterRelease {
		s.recordUnattributed(ctx, host, r)
	}
}

// recordUnattributed records a refusal with a fatal reason of a session not proven to be the host's
// (attest.Result.Unattributed), or any refusal that comes after the host's release in this attempt, in
// UnattributedRefusalAnnotation and as a Warning Event naming the reason and the request's address. It
// does not touch AttestationAnnotation: another session must not replace the outcome the controller
// acts on.
func (s AttestStore) recordUnattributed(ctx context.Context, host string, r attest.Result) {
	from := r.Address.String()
	raw, _ := json.Marshal(AttestationRecord{At: *now(), Reason: r.Reason, Message: r.Message, From: from})
	var h *metal3v1.BareMetalHost
	err := retry.RetryOnConflict(recordBackoff, func() error {
		var err error
		if h, err = s.get(ctx, host); err != nil {
			return err
		}
		orig := h.DeepCopy()
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[UnattributedRefusalAnnotation] = string(raw)
		return s.Client.Patch(ctx, h, client.MergeFrom(orig))
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to record unattributed attestation refusal", "BareMetalHost", host, "reason", r.Reason)
		return
	}
	if s.Recorder != nil {
		if r.Unattributed {
			s.Recorder.Eventf(h, corev1.EventTypeWarning, UnattributedAttestationRefusalEvent,
				"An attestation session for this host from %s was refused (%s: %s). %s is not the address Yonder's DHCP server leases to the host "+
					"(proxyDHCP, or no annotation %s), so anyone on the boot LAN may have opened it: it is no evidence against the host, which stays on "+
					"and may still attest in this attempt; if it does not, the attempt times out naming this refusal",
				from, r.Reason, r.Message, from, BootAddressAnnotation)
		} else {
			s.Recorder.Eventf(h, corev1.EventTypeWarning, UnattributedAttestationRefusalEvent,
				"An attestation request for this host from %s was refused (%s: %s) after the host had received its data in this attempt: "+
					"it is another session's (a refetch, or someone on the boot LAN with an earlier ticket) and changes nothing",
				from, r.Reason, r.Message)
		}
	}
}
