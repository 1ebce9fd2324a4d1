package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// CreateNode creates a Node with labels and then sets its status (Ready condition, InternalIP), as a
// kubelet would.
func CreateNode(ctx context.Context, c client.Client, name string, labels map[string]string, internalIP string, ready bool) (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Create(ctx, n); err != nil {
		return nil, fmt.Errorf("failed to create Node %s: %w", name, err)
	}
	return n, SetNodeStatus(ctx, c, n, internalIP, ready)
}

// SetNodeStatus sets a Node's Ready condition and InternalIP.
func SetNodeStatus(ctx context.Context, c client.Client, n *corev1.Node, internalIP string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	// A merge patch, not an update: the controller writes the same Node (labels, pod CIDRs) at the same time.
	orig := n.DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if internalIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	}
	if err := c.Status().Patch(ctx, n, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to set status of Node %s: %w", n.Name, err)
	}
	return nil
}

// PublishNodeNetwork creates or updates a Node's NodeNetwork as the daemon would: key, endpoint, Ready,
// and GatewayReady when gatewayReady is not nil.
func PublishNodeNetwork(ctx context.Context, c client.Client, node, publicKey, endpoint string, gatewayReady *bool) error {
	nn := &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(nn), nn); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get NodeNetwork %s: %w", node, err)
	}
	nn.Spec = netv1.NodeNetworkSpec{
		PublicKey: publicKey,
		Endpoints: []netv1.Endpoint{{Address: endpoint, Type: netv1.EndpointExternal}},
		Ports:     netv1.Ports{WireGuard: 51820, Probe: 51822},
		Protocols: []netv1.Protocol{netv1.ProtocolWireGuard, netv1.ProtocolVXLAN},
	}
	var err error
	if nn.ResourceVersion == "" {
		err = c.Create(ctx, nn)
	} else {
		err = c.Update(ctx, nn)
	}
	if err != nil {
		return fmt.Errorf("failed to publish NodeNetwork %s: %w", node, err)
	}
	meta.SetStatusCondition(&nn.Status.Conditions, metav1.Condition{Type: netv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "DataplaneProgrammed"})
	if gatewayReady != nil {
		s, reason := metav1.ConditionTrue, "Forwarding"
		if !*gatewayReady {
			s, reason = metav1.ConditionFalse, "ProbeFailed"
		}
		meta.SetStatusCondition(&nn.Status.Conditions, metav1.Condition{Type: netv1.NodeNetworkGatewayReadyCondition, Status: s, Reason: reason})
	}
	if err := c.Status().Update(ctx, nn); err != nil {
		return fmt.Errorf("failed to publish NodeNetwork status %s: %w", node, err)
	}
	return nil
}
