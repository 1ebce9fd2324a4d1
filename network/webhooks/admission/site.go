package admission

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/ipam"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// +kubebuilder:webhook:path=/validate-network-yonder-dev-v1alpha1-site,mutating=false,failurePolicy=fail,sideEffects=None,groups=network.yonder.dev,resources=sites,verbs=create;update,versions=v1alpha1,name=validation.site.network.yonder.dev,admissionReviewVersions=v1

// Site validates Sites.
type Site struct {
	// Reader lists the other Sites and GatewayPools (overlaps).
	Reader client.Reader
}

// ipv6MinMTU is the smallest MTU an IPv6 link may have (RFC 8200).
const ipv6MinMTU = 1280

// ValidateCreate validates a new Site.
func (w *Site) ValidateCreate(ctx context.Context, s *netv1.Site) (admission.Warnings, error) {
	return w.validate(ctx, nil, s)
}

// ValidateUpdate validates a changed Site.
func (w *Site) ValidateUpdate(ctx context.Context, old, s *netv1.Site) (admission.Warnings, error) {
	return w.validate(ctx, old, s)
}

// ValidateDelete allows deletion.
func (w *Site) ValidateDelete(context.Context, *netv1.Site) (admission.Warnings, error) {
	return nil, nil
}

func (w *Site) validate(ctx context.Context, old, s *netv1.Site) (admission.Warnings, error) {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	// The name is a label value and a prefix of PeerSlice names.
	for _, msg := range validation.IsDNS1123Label(s.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), s.Name, msg))
	}
	errs = append(errs, kubeletProofKeys(spec.Child("nodeSelector"), s.Spec.NodeSelector)...)
	nodeCIDRs, e := parseCIDRs(spec.Child("nodeCIDRs"), s.Spec.NodeCIDRs)
	errs = append(errs, e...)
	_, e = parseCIDRs(spec.Child("nonMasqueradeCIDRs"), s.Spec.NonMasqueradeCIDRs)
	errs = append(errs, e...)

	var pools []cidr
	hasIPv6 := false
	for i, p := range s.Spec.PodCIDRPools {
		path := spec.Child("podCIDRPools").Index(i)
		parsed, err := ipam.ParsePool(p)
		if err != nil {
			errs = append(errs, field.Invalid(path, p, err.Error()))
			continue
		}
		hasIPv6 = hasIPv6 || parsed.Prefix.Addr().Is6()
		pools = append(pools, cidr{prefix: parsed.Prefix, path: path.Child("cidr")})
		// Existing blocks were carved at the old size; another size would hand out overlapping blocks.
		if old != nil {
			for _, op := range old.Spec.PodCIDRPools {
				if op.CIDR == p.CIDR && blockSize(op) != blockSize(p) {
					errs = append(errs, field.Forbidden(path.Child("blockSize"), "cannot change the block size of an existing pool: add a new pool instead"))
				}
			}
		}
	}
	errs = append(errs, overlaps(pools, nil, true)...)
	errs = append(errs, overlaps(pools, nodeCIDRs, false)...)
	errs = append(errs, overlaps(nodeCIDRs, nil, true)...)

	// IPv6 pods need an inner MTU of at least 1280; any link may end up WireGuard ("encryption wins").
	if hasIPv6 {
		worst := max(plan.Overhead(plan.ResolveIntraSite(s.Spec.Tunnel.IntraSite)), plan.Overhead(netv1.ProtocolWireGuard))
		if m := plan.SiteMTU(s); m-worst < ipv6MinMTU {
			errs = append(errs, field.Invalid(spec.Child("mtu"), m, fmt.Sprintf("too small for IPv6 pods: the tunnel MTU would fall below 1280; use at least %d", ipv6MinMTU+worst)))
		}
	}
	if len(errs) > 0 {
		return nil, invalid("Site", s.Name, errs)
	}

	sites, gwPools, err := listOthers(ctx, w.Reader)
	if err != nil {
		return nil, err
	}
	var others []cidr
	for i := range sites {
		if sites[i].Name != s.Name {
			others = append(others, siteCIDRs(&sites[i])...)
		}
	}
	for i := range gwPools {
		if gwPools[i].Spec.Site != s.Name {
			others = append(others, poolCIDRs(&gwPools[i])...)
		}
	}
	errs = append(errs, overlaps(append(pools, nodeCIDRs...), others, false)...)
	var warnings admission.Warnings
	if old != nil {
		for _, op := range old.Spec.PodCIDRPools {
			kept := false
			for _, p := range s.Spec.PodCIDRPools {
				kept = kept || p.CIDR == op.CIDR
			}
			if !kept {
				warnings = append(warnings, "pod CIDR pool "+op.CIDR+" removed: Nodes keep their blocks from it (pod CIDRs are immutable); the plan routes those blocks individually")
			}
		}
	}
	if s.Spec.NodeSelector == nil && len(s.Spec.NodeCIDRs) == 0 {
		warnings = append(warnings, "spec.nodeSelector and spec.nodeCIDRs are both empty: this Site selects no Node")
	}
	return warnings, invalid("Site", s.Name, errs)
}

func blockSize(p netv1.PodCIDRPool) int32 {
	if parsed, err := ipam.ParsePool(p); err == nil {
		return int32(parsed.BlockBits) //nolint:gosec // at most 128.
	}
	return p.BlockSize
}
