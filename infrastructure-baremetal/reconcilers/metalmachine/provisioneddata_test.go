package metalmachine

import (
	"context"
	"net/netip"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// A provisioned host's metaData and networkData Secrets are read once per claim: its config drive was
// written from them when it provisioned, so later passes (every change of the host or its Machine) take
// what the first read found. Other Secret references or another claim read again; a read that found a
// Secret missing is not kept, and a withdrawn host's entry is dropped.
//
// The fake client is deliberate: the test counts the adapter's Secret reads, and the Secrets it serves
// never change; the envtest suites (TestMachineDeploymentClaimsDistinctHostsAcrossFailureDomains) check
// the addresses against a real API server.
func TestProvisionedHostsSecretsAreReadOncePerClaim(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	secret := func(name, key, value string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{key: []byte(value)}}
	}
	reads := map[string]int{}
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		secret("md", "metaData", "hostname: node-a\n"),
		secret("nd", "networkData", `{"networks":[{"type":"ipv4","ip_address":"192.0.2.10"}]}`),
		secret("nd2", "networkData", `{"networks":[{"type":"ipv4","ip_address":"192.0.2.20"}]}`),
	).Build(), interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			reads[key.Name]++
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	a := &Adapter{Client: c}
	host := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "host-a"}}
	host.Spec.MetaData = &corev1.SecretReference{Namespace: "ns", Name: "md"}
	host.Spec.NetworkData = &corev1.SecretReference{Namespace: "ns", Name: "nd"}
	m := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "machine-1"}}

	want := Inventory{Hostname: "node-a", Static: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}
	for range 3 {
		g.Expect(a.inventory(ctx, m, host)).To(Equal(want))
	}
	g.Expect(reads).To(Equal(map[string]int{"md": 1, "nd": 1}), "one read of each Secret for the claim")

	// Another networkData Secret on the host: read again (both: the key is the whole config drive's).
	host.Spec.NetworkData.Name = "nd2"
	want.Static = []netip.Addr{netip.MustParseAddr("192.0.2.20")}
	g.Expect(a.inventory(ctx, m, host)).To(Equal(want))
	g.Expect(a.inventory(ctx, m, host)).To(Equal(want))
	g.Expect(reads).To(Equal(map[string]int{"md": 2, "nd": 1, "nd2": 1}))

	// Another claim of the same host (a new Machine, or the claim identity kept across a move): read again.
	m2 := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m2", UID: "machine-2"}}
	g.Expect(a.inventory(ctx, m2, host)).To(Equal(want))
	g.Expect(reads).To(Equal(map[string]int{"md": 3, "nd": 1, "nd2": 2}))
	moved := m2.DeepCopy()
	moved.UID = "machine-2-after-move"
	moved.Annotations = map[string]string{infrav1.ClaimIDAnnotation: "machine-2"}
	g.Expect(a.inventory(ctx, moved, host)).To(Equal(want))
	g.Expect(reads).To(Equal(map[string]int{"md": 3, "nd": 1, "nd2": 2}), "a moved machine keeps its claim identity")

	// Withdrawn (or released as an orphan): forgotten.
	a.provisioned.forget(host.UID)
	g.Expect(a.inventory(ctx, m2, host)).To(Equal(want))
	g.Expect(reads).To(Equal(map[string]int{"md": 4, "nd": 1, "nd2": 3}))

	// A Secret that is missing leaves its part out and is read again on the next pass.
	host.Spec.NetworkData.Name = "gone"
	for range 2 {
		g.Expect(a.inventory(ctx, m2, host)).To(Equal(Inventory{Hostname: "node-a"}))
	}
	g.Expect(reads).To(Equal(map[string]int{"md": 6, "nd": 1, "nd2": 3, "gone": 2}))
}
