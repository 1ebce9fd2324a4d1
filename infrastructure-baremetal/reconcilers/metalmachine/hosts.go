package metalmachine

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// ConsumerKind is the kind written into a claimed host's spec.consumerRef.
const ConsumerKind = "YonderMetalMachine"

// IsClaimedBy reports whether h's consumerRef names the YonderMetalMachine with uid.
func IsClaimedBy(h *metal3v1.BareMetalHost, uid types.UID) bool {
	r := h.Spec.ConsumerRef
	return r != nil && r.Kind == ConsumerKind && r.UID == uid
}

// Available reports whether h can be claimed: free, managed and ready (Metal3's "available", or the
// older "ready"), not paused or detached, not in error, not being deleted.
func Available(h *metal3v1.BareMetalHost) bool {
	if h.Spec.ConsumerRef != nil || !h.DeletionTimestamp.IsZero() {
		return false
	}
	if _, ok := h.Annotations[metal3v1.PausedAnnotation]; ok {
		return false
	}
	if _, ok := h.Annotations[metal3v1.DetachedAnnotation]; ok {
		return false
	}
	if h.Status.ErrorType != "" || h.Status.OperationalStatus == metal3v1.OperationalStatusError ||
		h.Status.OperationalStatus == metal3v1.OperationalStatusDetached {
		return false
	}
	s := h.Status.Provisioning.State
	return s == metal3v1.StateAvailable || s == metal3v1.StateReady
}

// Released reports whether a host whose image was withdrawn is done deprovisioning: it is available
// again, or it is back before availability (registering, inspecting…) with no image recorded as deployed
// (status.provisioning.image), so nothing of the Machine can be left on it.
func Released(h *metal3v1.BareMetalHost) bool {
	switch h.Status.Provisioning.State {
	case metal3v1.StateAvailable, metal3v1.StateReady:
		return true
	case metal3v1.StateNone, metal3v1.StateUnmanaged, metal3v1.StateRegistering, metal3v1.StateInspecting,
		metal3v1.StatePreparing, metal3v1.StateMatchProfile:
		return h.Status.Provisioning.Image.URL == ""
	}
	return false
}

// FailureDomain returns h's failure domain label ("" when it has none).
func FailureDomain(h *metal3v1.BareMetalHost) string { return h.Labels[infrav1.FailureDomainLabel] }

// Candidates returns the hosts a machine of cluster may claim, best first: matching sel; hosts in
// failureDomain (when set) before others; then hosts in the failure domain holding the fewest hosts of
// the same Cluster (spreading); then in random order, so equal hosts are used evenly and concurrent
// claims of different Machines rarely collide.
func Candidates(hosts []metal3v1.BareMetalHost, sel *metav1.LabelSelector, failureDomain, cluster string) ([]*metal3v1.BareMetalHost, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("failed to parse hostSelector: %w", err)
	}
	perDomain := map[string]int{}
	for i := range hosts {
		h := &hosts[i]
		if h.Spec.ConsumerRef != nil && h.Spec.ConsumerRef.Kind == ConsumerKind && clusterOf(h) == cluster {
			perDomain[FailureDomain(h)]++
		}
	}
	var out []*metal3v1.BareMetalHost
	for i := range hosts {
		h := &hosts[i]
		if Available(h) && s.Matches(labels.Set(h.Labels)) {
			out = append(out, h)
		}
	}
	//nolint:gosec // spreading load over equal hosts needs no unpredictability
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	sort.SliceStable(out, func(i, j int) bool {
		if failureDomain != "" {
			fi, fj := FailureDomain(out[i]) == failureDomain, FailureDomain(out[j]) == failureDomain
			if fi != fj {
				return fi
			}
		}
		return perDomain[FailureDomain(out[i])] < perDomain[FailureDomain(out[j])]
	})
	return out, nil
}

// ClusterLabel on a claimed host names the Cluster of its consumer, so spreading can count a Cluster's
// hosts per failure domain without reading every Machine. (Not cluster.x-k8s.io/cluster-name: the host is
// inventory and must not look like one of the Cluster's objects.)
const ClusterLabel = "metal.infrastructure.yonder.dev/cluster-name"

func clusterOf(h *metal3v1.BareMetalHost) string { return h.Labels[ClusterLabel] }

// Addresses returns the machine addresses of h: the IPs of its inspected NICs and its hostname.
func Addresses(h *metal3v1.BareMetalHost) []clusterv1.MachineAddress {
	var out []clusterv1.MachineAddress
	hw := h.Status.HardwareDetails
	if hw == nil {
		return nil
	}
	for _, n := range hw.NIC {
		a, err := netip.ParseAddr(n.IP)
		if err != nil {
			continue
		}
		t := clusterv1.MachineInternalIP
		if a.Is4() && !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			t = clusterv1.MachineExternalIP
		}
		out = append(out, clusterv1.MachineAddress{Type: t, Address: a.String()})
	}
	if hw.Hostname != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: hw.Hostname})
	}
	if len(out) > 32 {
		out = out[:32]
	}
	return out
}
