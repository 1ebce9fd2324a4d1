package admission

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-metal3-io-v1alpha1-baremetalhost,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=metal3.io,resources=baremetalhosts,versions=v1alpha1,name=validation.baremetalhost.metal3.io,sideEffects=None,admissionReviewVersions=v1

// BareMetalHost validates the BareMetalHosts Yonder manages (label metal.yonder.dev/managed=true before
// or after the change; every other host belongs to another controller, e.g. Metal3's baremetal-operator,
// and its webhook): Metal3's rules that users of its API expect (the BMC address changes only while the
// host registers or is detached, the boot MAC never once set, Secrets are read from the host's own
// namespace), a claimed host keeps its BMC, the boot MAC is unique among managed hosts in every
// namespace (the boot services find a host by it), every value that goes into the host's iPXE
// script is one word of it (inventory.CheckBootValue), and a TPM enrolment window that is opened or
// moved closes within infrav1.MaxEnrolmentWindow. hosts lists hosts uncached, for the MAC check.
//
// Values are checked on create and, on update, only where they change: a host written before this
// webhook existed can still get its finalizer removed. The controller keeps its own checks (a
// duplicate created by two requests at once passes both webhooks; the controller stops the later host).
func BareMetalHost(hosts client.Reader) *webhooks.Validator[*metal3v1.BareMetalHost] {
	w := hostWebhook{hosts: hosts, now: time.Now}
	return &webhooks.Validator[*metal3v1.BareMetalHost]{Kind: metal3v1.GroupVersion.WithKind("BareMetalHost").GroupKind(), Create: w.create, Change: w.change}
}

type hostWebhook struct {
	hosts client.Reader
	now   func() time.Time
}

// managed reports whether Yonder's host controller reconciles h.
func managed(h *metal3v1.BareMetalHost) bool { return h.Labels[baremetalhost.ManagedLabel] == "true" }

var spec = field.NewPath("spec")

func (w hostWebhook) create(ctx context.Context, h *metal3v1.BareMetalHost) field.ErrorList {
	if !managed(h) {
		return nil
	}
	errs := validateHostValues(nil, h)
	errs = append(errs, enrolmentWindow(nil, h, w.now())...)
	return append(errs, w.bootMACUnique(ctx, h)...)
}

func (w hostWebhook) change(ctx context.Context, old, h *metal3v1.BareMetalHost) field.ErrorList {
	if !managed(old) && !managed(h) {
		return nil
	}
	errs := hostChange(old, h)
	if !managed(h) {
		return errs // handed to another controller: its webhook checks the values
	}
	if !managed(old) {
		old = nil // newly handed to Yonder: every value is new to it
	}
	errs = append(errs, validateHostValues(old, h)...)
	errs = append(errs, enrolmentWindow(old, h, w.now())...)
	if old == nil || old.Spec.BootMACAddress == "" {
		// Newly managed, or the MAC is set for the first time (changing a set one is refused above).
		errs = append(errs, w.bootMACUnique(ctx, h)...)
	}
	return errs
}

// hostChange applies the immutability rules: Metal3's, and the claimed host's BMC.
func hostChange(old, h *metal3v1.BareMetalHost) field.ErrorList {
	var errs field.ErrorList
	bmc := spec.Child("bmc")
	claimed := old.Spec.ConsumerRef != nil
	switch {
	case old.Spec.BMC.Address == h.Spec.BMC.Address:
	case claimed:
		// The Machine's Node runs on the host behind this BMC; pointing the claim at another BMC would
		// power-cycle and provision a machine nobody chose (also in the update that releases it).
		errs = append(errs, field.Forbidden(bmc.Child("address"), claimedMessage(old)))
	case old.Spec.BMC.Address != "" && h.Status.OperationalStatus != metal3v1.OperationalStatusDetached &&
		h.Status.Provisioning.State != metal3v1.StateRegistering:
		errs = append(errs, field.Forbidden(bmc.Child("address"),
			"BMC address can not be changed if the BMH is not in the Registering state, or if the BMH is not detached"))
	}
	if claimed && old.Spec.BMC.CredentialsName != h.Spec.BMC.CredentialsName {
		errs = append(errs, field.Forbidden(bmc.Child("credentialsName"), claimedMessage(old)))
	}
	if old.Spec.BootMACAddress != "" && normalMAC(old.Spec.BootMACAddress) != normalMAC(h.Spec.BootMACAddress) {
		errs = append(errs, field.Forbidden(spec.Child("bootMACAddress"), "bootMACAddress can not be changed once it is set"))
	}
	return errs
}

func claimedMessage(old *metal3v1.BareMetalHost) string {
	return fmt.Sprintf("cannot change while the host is claimed by %s %s; delete its Machine first", old.Spec.ConsumerRef.Kind, old.Spec.ConsumerRef.Name)
}

// validateHostValues checks what h's boot services and provisioning read from it, those of its values
// that differ from old's (every value when old is nil).
func validateHostValues(old, h *metal3v1.BareMetalHost) field.ErrorList {
	if old == nil {
		old = &metal3v1.BareMetalHost{}
	}
	var errs field.ErrorList
	if mac := h.Spec.BootMACAddress; mac != "" && mac != old.Spec.BootMACAddress {
		if _, err := net.ParseMAC(mac); err != nil {
			errs = append(errs, field.Invalid(spec.Child("bootMACAddress"), mac, "not a MAC address: "+err.Error()))
		}
	}
	if a := h.Annotations[baremetalhost.BootAddressAnnotation]; a != "" && a != old.Annotations[baremetalhost.BootAddressAnnotation] {
		if addr, err := netip.ParseAddr(a); err != nil || !addr.Is4() {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(baremetalhost.BootAddressAnnotation), a,
				"the address the DHCP server reserves for the boot NIC must be an IPv4 address"))
		}
	}
	errs = append(errs, imageValues(old.Spec.Image, h.Spec.Image)...)
	for _, ref := range []struct {
		name     string
		old, cur *corev1.SecretReference
	}{{"userData", old.Spec.UserData, h.Spec.UserData}, {"networkData", old.Spec.NetworkData, h.Spec.NetworkData}, {"metaData", old.Spec.MetaData, h.Spec.MetaData}} {
		if ref.cur != nil && (ref.old == nil || ref.old.Namespace != ref.cur.Namespace) {
			errs = append(errs, webhooks.LocalSecret(ref.cur.Namespace, h.Namespace, spec.Child(ref.name, "namespace"))...)
		}
	}
	return errs
}

// enrolmentWindowSkew is how far past now+MaxEnrolmentWindow a deadline may be: `kubectl yonder host
// enrol --for 24h` computes it on the operator's machine, whose clock may run a little ahead.
const enrolmentWindowSkew = 5 * time.Minute

// enrolmentWindow checks a TPM enrolment window that h opens or moves (old nil: created): an RFC 3339
// deadline at most infrav1.MaxEnrolmentWindow from now. The window is trust on first use — whichever TPM
// boots in it first is pinned — so it is bounded where it is written, not only by the CLI (a plain
// `kubectl annotate` passes no CLI). A deadline in the past is a closed window and harmless.
func enrolmentWindow(old, h *metal3v1.BareMetalHost, now time.Time) field.ErrorList {
	raw, ok := h.Annotations[baremetalhost.EnrolmentWindowAnnotation]
	if !ok || (old != nil && old.Annotations[baremetalhost.EnrolmentWindowAnnotation] == raw) {
		return nil
	}
	p := field.NewPath("metadata", "annotations").Key(baremetalhost.EnrolmentWindowAnnotation)
	deadline, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, raw, "the TPM enrolment window must be an RFC 3339 deadline, e.g. "+
			now.Add(30*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339)+" (kubectl yonder host enrol --for 30m)")}
	}
	if latest := now.Add(infrav1.MaxEnrolmentWindow + enrolmentWindowSkew); deadline.After(latest) {
		return field.ErrorList{field.Invalid(p, raw, fmt.Sprintf("the TPM enrolment window may stay open for at most %s: "+
			"whichever TPM boots in it first is pinned; choose a deadline before %s", infrav1.MaxEnrolmentWindow,
			now.Add(infrav1.MaxEnrolmentWindow).UTC().Truncate(time.Second).Format(time.RFC3339)))}
	}
	return nil
}

// imageValues checks the image values the host's iPXE script carries on the agent's kernel line.
func imageValues(old, img *metal3v1.Image) field.ErrorList {
	if img == nil {
		return nil
	}
	if old == nil {
		old = &metal3v1.Image{}
	}
	p := spec.Child("image")
	var errs field.ErrorList
	for _, v := range []struct {
		path       *field.Path
		old, value string
	}{
		{p.Child("url"), old.URL, img.URL},
		{p.Child("checksum"), old.Checksum, img.Checksum},
		{p.Child("checksumType"), string(old.ChecksumType), string(img.ChecksumType)},
	} {
		if v.value == v.old {
			continue
		}
		if err := inventory.CheckBootValue(v.path.String(), v.value); err != nil {
			errs = append(errs, field.Invalid(v.path, v.value, err.Error()))
		}
	}
	return errs
}

// bootMACUnique refuses a boot MAC that another managed host, in any namespace, already has: the DHCP
// and iPXE services find a host by it, and would hand one host's script, ticket and data to the other.
func (w hostWebhook) bootMACUnique(ctx context.Context, h *metal3v1.BareMetalHost) field.ErrorList {
	mac := normalMAC(h.Spec.BootMACAddress)
	if mac == "" {
		return nil
	}
	p := spec.Child("bootMACAddress")
	list := &metal3v1.BareMetalHostList{}
	if err := w.hosts.List(ctx, list, client.MatchingLabels{baremetalhost.ManagedLabel: "true"}); err != nil {
		return field.ErrorList{field.InternalError(p, fmt.Errorf("failed to list the managed BareMetalHosts: %w", err))}
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Namespace == h.Namespace && o.Name == h.Name {
			continue
		}
		if normalMAC(o.Spec.BootMACAddress) == mac {
			return field.ErrorList{field.Invalid(p, h.Spec.BootMACAddress, fmt.Sprintf(
				"is already the boot MAC of BareMetalHost %s: the boot services find a host by its boot MAC, so every host Yonder manages needs its own", klog.KObj(o)))}
		}
	}
	return nil
}

// normalMAC returns mac in one spelling (lower case, colons) so that 52-54-00-AA-BB-CC and
// 52:54:00:aa:bb:cc compare equal; a value that is not a MAC is only lower-cased.
func normalMAC(mac string) string {
	if hw, err := net.ParseMAC(mac); err == nil {
		return hw.String()
	}
	return strings.ToLower(mac)
}
