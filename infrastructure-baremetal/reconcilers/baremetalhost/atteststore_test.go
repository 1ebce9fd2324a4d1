package baremetalhost_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
)

// laggingClient is a manager client whose cache has not seen the latest write of one host yet: Get of
// that host returns an older copy, as an informer that lags behind the apiserver does.
type laggingClient struct {
	client.Client
	stale *metal3v1.BareMetalHost
}

func (c laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if h, ok := obj.(*metal3v1.BareMetalHost); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(h)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// The race behind a healthy host ending in error: the controller writes "provisioning" and power-cycles
// the host into its PXE boot; the host attests before the manager's cache has seen that write. Deciding
// on the cached host refuses the release (NoBootstrapData, which fails the provisioning for good); the
// store reads through the API reader and releases the data. The lagging cache makes the race
// deterministic.
func TestBootstrapDataReadsPastALaggingCache(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-lag").Name
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "join"},
		Data: map[string][]byte{"value": []byte("#cloud-config\n")}})).To(Succeed())
	h := &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h1", Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec:       metal3v1.BareMetalHostSpec{Online: true, UserData: &corev1.SecretReference{Namespace: ns, Name: "join"}},
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	h.Status.Provisioning.State = metal3v1.StateAvailable
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	cached := h.DeepCopy()
	h.Status.Provisioning.State = metal3v1.StateProvisioning
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	lagging := laggingClient{Client: env.Client, stale: cached}
	name := ns + "/h1"

	_, err := baremetalhost.AttestStore{Client: lagging}.BootstrapData(ctx, name)
	g.Expect(err).To(MatchError(ContainSubstring(`is "available", not provisioning`)), "the lagging cache should reproduce the refusal")

	data, err := baremetalhost.AttestStore{Client: lagging, Reader: env.GetAPIReader()}.BootstrapData(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("#cloud-config\n"))
}
