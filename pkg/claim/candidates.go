package claim

import (
	"fmt"
	"hash/fnv"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Candidates returns the hosts consumer c may claim, best first. A host qualifies when it is
// available, matches sel and, when failureDomain is set, is in that failure domain (the Machine's
// failure domain is a requirement, as CAPI's contract has it, not a preference). Order: hosts the
// inventory demotes (e.g. last probe failed) last; then hosts in the failure domain that holds the fewest
// hosts of c's Cluster (spreading: CAPI assigns no failure domains to MachineSet Machines); then an order
// that depends on c's claim identity, so equal hosts are used evenly and concurrent claims of different
// machines rarely collide on one host.
func Candidates[H client.Object](inv Inventory[H], hosts []H, sel *metav1.LabelSelector, failureDomain string, c Consumer) ([]H, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("failed to parse hostSelector: %w", err)
	}
	perDomain := map[string]int{}
	for _, h := range hosts {
		if held := inv.ConsumerOf(h); held != nil && held.Cluster == c.Cluster {
			perDomain[inv.FailureDomain(h)]++
		}
	}
	out := []H{}
	for _, h := range hosts {
		if !inv.Available(h) || !s.Matches(labels.Set(h.GetLabels())) {
			continue
		}
		if failureDomain != "" && inv.FailureDomain(h) != failureDomain {
			continue
		}
		out = append(out, h)
	}
	rank := func(h H) uint32 {
		f := fnv.New32a()
		_, _ = f.Write([]byte(string(c.ID) + "/" + h.GetName()))
		return f.Sum32()
	}
	sort.SliceStable(out, func(i, j int) bool {
		if di, dj := inv.Demoted(out[i]), inv.Demoted(out[j]); di != dj {
			return dj
		}
		if ni, nj := perDomain[inv.FailureDomain(out[i])], perDomain[inv.FailureDomain(out[j])]; ni != nj {
			return ni < nj
		}
		return rank(out[i]) < rank(out[j])
	})
	return out, nil
}

// FailureDomains returns the sorted distinct failure domains of the hosts matching sel, plus extra, at
// most limit of them (0: no limit).
func FailureDomains[H client.Object](inv Inventory[H], hosts []H, sel labels.Selector, extra []string, limit int) []string {
	seen := map[string]bool{}
	for _, fd := range extra {
		seen[fd] = true
	}
	for _, h := range hosts {
		if fd := inv.FailureDomain(h); fd != "" && sel.Matches(labels.Set(h.GetLabels())) {
			seen[fd] = true
		}
	}
	names := make([]string, 0, len(seen))
	for fd := range seen {
		names = append(names, fd)
	}
	sort.Strings(names)
	if limit > 0 && len(names) > limit {
		names = names[:limit]
	}
	return names
}
