package apisync

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// daemonUser is the node DaemonSet's ServiceAccount as config/default names it.
const daemonUser = "system:serviceaccount:yonder-network:yonder-net-node"

// applyFile creates every object of a YAML file (kustomize-free: names as written).
func applyFile(t *testing.T, c client.Client, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), u) })
	}
}

// TestNodeMayWriteOnlyItsOwnNodeNetwork: with the node role (RBAC) and the ValidatingAdmissionPolicy of
// config/node, the daemon's ServiceAccount writes the NodeNetwork named like the Node its token is bound to,
// and is refused any other (spec and status), and refused outright without a node-bound token.
func TestNodeMayWriteOnlyItsOwnNodeNetwork(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	applyFile(t, admin, "../../../config/node/policy.yaml")
	applyFile(t, admin, "../../../config/rbac/node_role.yaml") // the role; its binding names the unprefixed SA
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-node-daemon"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-role"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "yonder-net-node", Namespace: "yonder-network"}}}
	g.Expect(admin.Create(ctx, crb)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), crb) })

	as := func(node string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: daemonUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
		if node != "" {
			cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		c, err := client.New(cfg, client.Options{Scheme: env.GetScheme()})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	nn := func(name string) *netv1.NodeNetwork {
		return &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: netv1.NodeNetworkSpec{UnderlayMTU: 1500}}
	}
	onN1 := as("vp-n1")
	// The policy is loaded asynchronously by the API server.
	g.Eventually(func() error { return onN1.Create(ctx, nn("vp-n2")) }, 20*time.Second, 200*time.Millisecond).
		Should(MatchError(ContainSubstring("may only write the NodeNetwork of its own Node")))
	own := nn("vp-n1")
	g.Expect(onN1.Create(ctx, own)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), own) })
	own.Spec.UnderlayMTU = 9000
	g.Expect(onN1.Update(ctx, own)).To(Succeed())

	// Another node's object: spec and status are refused.
	other := nn("vp-n3")
	g.Expect(admin.Create(ctx, other)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), other) })
	other.Spec.UnderlayMTU = 1400
	g.Expect(onN1.Update(ctx, other)).To(MatchError(ContainSubstring("not vp-n3")))
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
	patched := other.DeepCopy()
	patched.Status.ObservedPlanGeneration = 7
	g.Expect(onN1.Status().Patch(ctx, patched, client.MergeFrom(other))).To(MatchError(ContainSubstring("may only write")))
	// A token not bound to a Node: nothing.
	g.Expect(as("").Create(ctx, nn("vp-n4"))).To(MatchError(ContainSubstring("its token names no Node")))
	// RBAC: the daemon cannot delete NodeNetworks at all.
	g.Expect(apierrors.IsForbidden(onN1.Delete(ctx, own))).To(BeTrue())
}
