// Package assign decides which Site a Node belongs to, from the Sites' node selectors and node CIDRs.
// It is a pure function of the Sites and the Node, so every controller replica and every restart agrees.
package assign

import (
	"fmt"
	"net/netip"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Site is a compiled Site.
type Site struct {
	// Name of the Site.
	Name string
	// Selector is nil when the Site selects no Node by label.
	Selector labels.Selector
	// CIDRs select Nodes by InternalIP.
	CIDRs []netip.Prefix
}

// Compile compiles Sites, sorted by name (the tie-break when a Node matches several). A Site whose
// selector or CIDRs do not parse selects nothing and is reported in the error.
func Compile(sites []netv1.Site) ([]Site, error) {
	out := make([]Site, 0, len(sites))
	var errs []error
	for i := range sites {
		s := &sites[i]
		cs := Site{Name: s.Name}
		if s.Spec.NodeSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(s.Spec.NodeSelector)
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to parse nodeSelector of Site %s: %w", s.Name, err))
				continue
			}
			cs.Selector = sel
		}
		for _, c := range s.Spec.NodeCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to parse nodeCIDR %q of Site %s: %w", c, s.Name, err))
				continue
			}
			cs.CIDRs = append(cs.CIDRs, p.Masked())
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(errs) > 0 {
		return out, fmt.Errorf("failed to compile Sites: %v", errs)
	}
	return out, nil
}

// Assign returns the Site of a Node ("" for none) and every Site that matched (more than one is a
// conflict the operator should resolve; the first by name wins meanwhile).
func Assign(sites []Site, nodeLabels map[string]string, internalIPs []netip.Addr) (string, []string) {
	var matched []string
	set := labels.Set(nodeLabels)
	for _, s := range sites {
		if matches(s, set, internalIPs) {
			matched = append(matched, s.Name)
		}
	}
	if len(matched) == 0 {
		return "", nil
	}
	return matched[0], matched
}

func matches(s Site, set labels.Set, ips []netip.Addr) bool {
	if s.Selector != nil && s.Selector.Matches(set) {
		return true
	}
	for _, c := range s.CIDRs {
		for _, ip := range ips {
			if c.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}
