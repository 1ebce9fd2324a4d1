package yondercontrolplane

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the server-side apply field manager in workload clusters.
const FieldManager = "yonder-controlplane"

// ManagedByLabel marks the objects Yonder installed in a workload cluster.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// joinBinding is one ClusterRoleBinding nodes need to join with a bootstrap token and the kubelet's
// TLS bootstrap: the same bindings kubeadm installs, under Yonder's own names so nothing kubeadm
// created is overwritten.
type joinBinding struct {
	name, clusterRole, group string
}

// JoinBindings are the ClusterRoleBindings installed in every attached cluster:
//   - bootstrappers (any bootstrap token) may create node-client CSRs,
//   - those CSRs are approved automatically by kube-controller-manager's csrapproving controller,
//   - nodes may renew their own client certificates.
//
// kubelet-serving CSRs are NOT auto-approved here: the bootstrap provider approves them only for Nodes it
// provisioned and only for the names and addresses of their Machines.
var JoinBindings = []joinBinding{
	{"yonder:kubelet-bootstrap", "system:node-bootstrapper", "system:bootstrappers"},
	{"yonder:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
	{"yonder:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
}

// applyJoinRBAC installs JoinBindings with server-side apply (idempotent, restores drift).
func applyJoinRBAC(ctx context.Context, cs kubernetes.Interface) error {
	for _, b := range JoinBindings {
		ac := rbacv1ac.ClusterRoleBinding(b.name).
			WithLabels(map[string]string{ManagedByLabel: "yonder"}).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(b.clusterRole)).
			WithSubjects(rbacv1ac.Subject().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Group").WithName(b.group))
		if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("failed to apply ClusterRoleBinding %s: %w", b.name, err)
		}
	}
	return nil
}
