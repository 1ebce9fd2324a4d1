// Package plantest builds synthetic route-plan inputs for benchmarks and tests, so that the pure
// benchmark (package plan) and the one against the apiserver (package routeplan) plan the same cluster.
package plantest

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// Key is a syntactically valid WireGuard public key (32 bytes, base64), distinct per name.
func Key(name string) string {
	sum := sha256.Sum256([]byte(name))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Synthetic is a cluster of nodes spread round-robin over sites (at most 256 nodes per Site, at most 240
// Sites), each Site with a pool of 2 gateways, all Sites peered through gateways in one SitePeering, every
// daemon published. Node i is named NodeName(i%sites, i/sites).
func Synthetic(nodes, sites int) plan.Input {
	in := plan.Input{Peerings: []netv1.SitePeering{{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}, Spec: netv1.SitePeeringSpec{Topology: netv1.TopologyGateway}}}}
	for s := range sites {
		name := SiteName(s)
		in.Sites = append(in.Sites, netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.SiteSpec{
			PodCIDRPools: []netv1.PodCIDRPool{{CIDR: fmt.Sprintf("10.%d.0.0/16", 10+s)}},
			NodeCIDRs:    []string{fmt.Sprintf("172.%d.0.0/16", 16+s)},
		}})
		in.Pools = append(in.Pools, netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: name + "-gw"}, Spec: netv1.GatewayPoolSpec{
			Site: name, NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "true"}},
		}})
		in.Peerings[0].Spec.Sites = append(in.Peerings[0].Spec.Sites, name)
	}
	for i := range nodes {
		s, j := i%sites, i/sites
		n := plan.Node{
			Name: NodeName(s, j), Site: SiteName(s), Ready: true, DataplaneReady: true,
			Labels:   map[string]string{},
			PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 10+s, j)},
			Network: &netv1.NodeNetworkSpec{
				PublicKey: Key(fmt.Sprint(i)),
				Endpoints: []netv1.Endpoint{{Address: fmt.Sprintf("172.%d.%d.%d", 16+s, j/250, j%250+1), Type: netv1.EndpointInternal}},
				Ports:     netv1.Ports{WireGuard: 51820},
			},
		}
		if j < 2 {
			n.Labels["gateway"] = "true"
		}
		in.Nodes = append(in.Nodes, n)
	}
	return in
}

// SiteName is the name of the s-th Site of Synthetic.
func SiteName(s int) string { return fmt.Sprintf("site-%02d", s) }

// NodeName is the name of the j-th node of the s-th Site of Synthetic.
func NodeName(s, j int) string { return fmt.Sprintf("site-%02d-node-%04d", s, j) }
