// Package admission validates the network API: CIDRs that do not parse or overlap (within a Site and
// across Sites and GatewayPools) and settings that cannot work are rejected with their field paths.
package admission

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// Setup registers the webhooks of every kind (pkg/webhooks, as every Yonder manager does).
func Setup(mgr ctrl.Manager) error {
	// The API reader, not the cache: a webhook must see the Site created a moment ago to catch overlaps.
	r := mgr.GetAPIReader()
	return webhooks.Setup(mgr,
		webhooks.For(&netv1.Site{}, &Site{Reader: r}),
		webhooks.For(&netv1.GatewayPool{}, &GatewayPool{Reader: r}),
		webhooks.For(&netv1.SitePeering{}, &SitePeering{}),
	)
}

// cidr is a parsed CIDR with the field it came from (for overlap messages).
type cidr struct {
	prefix netip.Prefix
	path   *field.Path
	owner  string // "" for the object under validation, else "Site x" / "GatewayPool y"
}

// parseCIDRs parses CIDRs, rejecting host bits so the stored form is canonical.
func parseCIDRs(path *field.Path, values []string) ([]cidr, field.ErrorList) {
	var out []cidr
	var errs field.ErrorList
	for i, v := range values {
		p, err := netip.ParsePrefix(v)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Index(i), v, "must be a CIDR such as 10.0.0.0/16 or fd00::/48"))
		case p.Masked() != p:
			errs = append(errs, field.Invalid(path.Index(i), v, fmt.Sprintf("has host bits set: use %s", p.Masked())))
		default:
			out = append(out, cidr{prefix: p, path: path.Index(i)})
		}
	}
	return out, errs
}

// overlaps reports every pair (mine × others, and among mine when self) that overlaps.
func overlaps(mine, others []cidr, self bool) field.ErrorList {
	var errs field.ErrorList
	for i, a := range mine {
		if self {
			for _, b := range mine[i+1:] {
				if a.prefix.Overlaps(b.prefix) {
					errs = append(errs, field.Invalid(b.path, b.prefix.String(), fmt.Sprintf("overlaps %s (%s)", a.path, a.prefix)))
				}
			}
		}
		for _, b := range others {
			if a.prefix.Overlaps(b.prefix) {
				errs = append(errs, field.Invalid(a.path, a.prefix.String(), fmt.Sprintf("overlaps %s %s of %s", b.path, b.prefix, b.owner)))
			}
		}
	}
	return errs
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: netv1.GroupVersion.Group, Kind: kind}, name, errs)
}

// listOthers lists Sites and GatewayPools other than the object under validation.
func listOthers(ctx context.Context, r client.Reader) ([]netv1.Site, []netv1.GatewayPool, error) {
	sites := &netv1.SiteList{}
	if err := r.List(ctx, sites); err != nil {
		return nil, nil, fmt.Errorf("failed to list Sites: %w", err)
	}
	pools := &netv1.GatewayPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return nil, nil, fmt.Errorf("failed to list GatewayPools: %w", err)
	}
	return sites.Items, pools.Items, nil
}

// siteCIDRs returns the pod pools and node CIDRs of a Site, tagged with their owner.
func siteCIDRs(s *netv1.Site) []cidr {
	var out []cidr
	spec := field.NewPath("spec")
	for i, p := range s.Spec.PodCIDRPools {
		if pfx, err := netip.ParsePrefix(p.CIDR); err == nil {
			out = append(out, cidr{prefix: pfx, path: spec.Child("podCIDRPools").Index(i).Child("cidr"), owner: "Site " + s.Name})
		}
	}
	for i, c := range s.Spec.NodeCIDRs {
		if pfx, err := netip.ParsePrefix(c); err == nil {
			out = append(out, cidr{prefix: pfx, path: spec.Child("nodeCIDRs").Index(i), owner: "Site " + s.Name})
		}
	}
	return out
}

func poolCIDRs(p *netv1.GatewayPool) []cidr {
	var out []cidr
	for i, c := range p.Spec.RoutedCIDRs {
		if pfx, err := netip.ParsePrefix(c); err == nil {
			out = append(out, cidr{prefix: pfx, path: field.NewPath("spec", "routedCIDRs").Index(i), owner: "GatewayPool " + p.Name})
		}
	}
	return out
}
