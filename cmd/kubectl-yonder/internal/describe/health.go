package describe

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

func endpoint(cl *clusterv1.Cluster) string {
	if ep := cl.Spec.ControlPlaneEndpoint; ep.IsValid() {
		return ep.String()
	}
	return "-"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 100 {
		s = s[:99] + "…"
	}
	return cli.Dash(s)
}

// negative are CAPI's conditions whose healthy state is False.
var negative = map[string]bool{"Paused": true, "Deleting": true, "Updating": true, "RollingOut": true, "Remediating": true,
	"ScalingUp": true, "ScalingDown": true, "Provisioning": true}

func healthy(c metav1.Condition) bool {
	if negative[c.Type] {
		return c.Status == metav1.ConditionFalse
	}
	return c.Status == metav1.ConditionTrue
}

// unhealthy lists the conditions that are not in their healthy state (the ones an operator has to look at).
func unhealthy(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		if !healthy(c) {
			out = append(out, c.Type+"="+string(c.Status))
		}
	}
	return strings.Join(out, ",")
}

func ready(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return "Unknown"
}

// nodeSite is the network add-on's assignment, else the topology zone.
func nodeSite(n corev1.Node) string {
	if s := n.Labels[netv1.SiteLabel]; s != "" {
		return s
	}
	return n.Labels[corev1.LabelTopologyZone]
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
