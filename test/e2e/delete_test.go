package e2e

import (
	"context"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/stack"
)

// TestClusterctlDeleteKeepsInventory: uninstalling the providers never takes the fleet with it. On a
// management cluster of its own (the real clusterctl init of ssh and metal, Metal3's CRD applied first as
// the quick start says) it registers a YonderSSHHost and a BareMetalHost with their Secrets, then
//
//  1. `clusterctl delete --infrastructure yonder-metal --include-crd` removes the metal provider and its
//     own CRDs, and the BareMetalHost CRD (Metal3's, not the provider's) and the BareMetalHost stay;
//  2. `clusterctl delete --all` removes every provider (no Deployment left), and every inventory object,
//     its Secret and its CRD stay — a later `clusterctl init` finds the fleet as it was.
func TestClusterctlDeleteKeepsInventory(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	source := st
	target, err := source.StartManagement(ctx, "inventory")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := target.Stop(); err != nil {
			t.Errorf("failed to stop management cluster inventory: %v", err)
		}
	})
	g.Expect(target.InstallMetal3CRDs(ctx)).To(Succeed())
	// clusterctl init checks cert-manager by creating its test resources in namespace cert-manager-test and
	// deleting it again; a second init while that namespace still terminates fails the check and then waits
	// for a cert-manager install that never comes (seen: hung until killed). Let the first one's go first.
	g.Eventually(func() bool {
		return apierrors.IsNotFound(target.Client.Get(ctx, client.ObjectKey{Name: "cert-manager-test"}, &corev1.Namespace{}))
	}, 3*time.Minute, time.Second).Should(BeTrue(), "namespace cert-manager-test of the first clusterctl init was not removed")
	const ns = "fleet"
	inventory := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack-ssh"}, Data: map[string][]byte{"ssh-privatekey": source.ClientKeyPEM}},
		&infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack-1"}, Spec: infrav1.YonderSSHHostSpec{
			SSHEndpoint: infrav1.SSHEndpoint{Address: "192.0.2.10", Port: 22, User: "root", CredentialsSecretRef: infrav1.SecretReference{Name: "rack-ssh"},
				HostKeyPolicy: infrav1.HostKeyPolicyTrustOnFirstUse}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server-1-bmc"}, Data: map[string][]byte{"username": []byte("admin"), "password": []byte("secret")}},
		&metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server-1", Labels: map[string]string{"metal.yonder.dev/managed": "true"}},
			Spec: metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: "redfish://192.0.2.20/redfish/v1/Systems/1", CredentialsName: "server-1-bmc"},
				BootMACAddress: "52:54:00:12:34:56"}},
	}
	// The fleet is registered before the metal provider is installed, as it is where Metal3's inventory
	// comes first: the metal manager, once installed, validates BareMetalHosts in its webhook, and this
	// management cluster runs no process for it (none is needed to show what clusterctl delete keeps, and a
	// running one would dial the hosts' made-up BMC address).
	for _, o := range inventory {
		g.Expect(target.Client.Create(ctx, o)).To(Succeed(), "%T %s", o, o.GetName())
	}
	_, err = target.Clusterctl(ctx, []string{"YONDER_IMAGE_REPOSITORY=" + target.ImageRepository()}, "init", "--infrastructure", "yonder-metal")
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("management cluster with ssh and metal providers in %s", time.Since(t0).Round(time.Second))

	stays := func(step string) {
		t.Helper()
		for _, o := range inventory {
			got := o.DeepCopyObject().(client.Object)
			g.Expect(target.Client.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed(), "%s deleted %T %s", step, o, o.GetName())
			g.Expect(got.GetDeletionTimestamp()).To(BeNil(), "%s is deleting %T %s", step, o, o.GetName())
		}
	}

	_, err = target.Clusterctl(ctx, nil, "delete", "--infrastructure", "yonder-metal", "--include-crd")
	g.Expect(err).NotTo(HaveOccurred())
	stays("delete --infrastructure yonder-metal --include-crd")
	g.Expect(crdExists(ctx, target, "baremetalhosts.metal3.io")).To(BeTrue(), "Metal3's CRD went with the provider")
	g.Expect(crdExists(ctx, target, "yondermetalmachines.infrastructure.cluster.x-k8s.io")).To(BeFalse(), "--include-crd left the provider's own CRD")
	deployments(ctx, t, target, "infrastructure-yonder-metal", 0)

	_, err = target.Clusterctl(ctx, nil, "delete", "--all")
	g.Expect(err).NotTo(HaveOccurred())
	stays("delete --all")
	deployments(ctx, t, target, "", 0)
	for _, name := range []string{"yondersshhosts.infrastructure.cluster.x-k8s.io", "baremetalhosts.metal3.io"} {
		g.Expect(crdExists(ctx, target, name)).To(BeTrue(), "delete --all removed CRD %s", name)
	}
	t.Logf("clusterctl delete (metal --include-crd, then --all) kept every inventory object, in %s in all", time.Since(t0).Round(time.Second))
}

// crdExists says whether the CRD is there and not being deleted.
func crdExists(ctx context.Context, s *stack.Stack, name string) bool {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return false
	}
	return crd.GetDeletionTimestamp() == nil
}

// deployments expects n provider Deployments (of provider, or of any provider when empty) in s.
func deployments(ctx context.Context, t *testing.T, s *stack.Stack, provider string, n int) {
	t.Helper()
	opts := []client.ListOption{client.HasLabels{stack.ProviderLabel}}
	if provider != "" {
		opts = []client.ListOption{client.MatchingLabels{stack.ProviderLabel: provider}}
	}
	l := &appsv1.DeploymentList{}
	NewWithT(t).Expect(s.Client.List(ctx, l, opts...)).To(Succeed())
	NewWithT(t).Expect(l.Items).To(HaveLen(n), "provider Deployments %q", provider)
}
