package plan

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// FromNode builds the plan's view of a Node and its daemon's NodeNetwork (nil when none is published).
// The Site is the Node's SiteLabel; the route plan reconciler replaces it with its own assignment (the
// same assign.Assign the node reconciler runs), so a node relabelling itself changes nothing.
func FromNode(n *corev1.Node, nn *netv1.NodeNetwork) Node {
	out := Node{
		Name:          n.Name,
		Site:          n.Labels[netv1.SiteLabel],
		Labels:        n.Labels,
		Unschedulable: n.Spec.Unschedulable,
		Deleting:      !n.DeletionTimestamp.IsZero(),
		PodCIDRs:      n.Spec.PodCIDRs,
	}
	if len(out.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		out.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, a := range n.Status.Addresses {
		switch a.Type {
		case corev1.NodeInternalIP:
			out.Addresses = append(out.Addresses, netv1.Endpoint{Address: a.Address, Type: netv1.EndpointInternal})
		case corev1.NodeExternalIP:
			out.Addresses = append(out.Addresses, netv1.Endpoint{Address: a.Address, Type: netv1.EndpointExternal})
		}
	}
	if n.ResourceVersion != "" {
		out.Version = n.ResourceVersion + "/"
		if nn != nil {
			out.Version += nn.ResourceVersion
		}
	}
	if nn != nil && nn.DeletionTimestamp.IsZero() {
		spec := nn.Spec
		out.Network = &spec
		out.DataplaneReady = meta.IsStatusConditionTrue(nn.Status.Conditions, netv1.ReadyCondition)
		if c := meta.FindStatusCondition(nn.Status.Conditions, netv1.NodeNetworkGatewayReadyCondition); c != nil && c.Status != metav1.ConditionUnknown {
			ok := c.Status == metav1.ConditionTrue
			out.GatewayReady = &ok
		}
	}
	return out
}

// InternalIPs are the Node's InternalIP addresses (what Sites' nodeCIDRs match).
func InternalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip)
		}
	}
	return out
}
