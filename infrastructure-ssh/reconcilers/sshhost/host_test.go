package sshhost_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// A host registered with trust-on-first-use gets the key its real sshd presents recorded into
// spec.hostKey at the first probe, its facts gathered, the move label on itself and its Secret, and
// phase Available. A claimed host cannot be deleted until released; an unreachable one says so.
func TestHostInventoryProbeTOFUAndDeletionGuard(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "host").Name
	hs, keyPEM := sshhosts.StartForTest(t, "hh", 1)
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}})).To(Succeed())
	h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tofu"},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: hs[0].Address.String(), CredentialsSecretRef: infrav1.SecretReference{Name: "key"},
			HostKeyPolicy: infrav1.HostKeyPolicyTrustOnFirstUse}, FailureDomain: "rack-1"}}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		g.Expect(h.Spec.HostKey).To(Equal(sshexec.FormatHostKey(hs[0].HostKey)))
		g.Expect(h.Spec.HostKeyPolicy).To(Equal(infrav1.HostKeyPolicyPinned), "trust on first use is spent once a key is recorded")
		g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseAvailable))
		g.Expect(h.Status.Facts).NotTo(BeNil())
		g.Expect(h.Status.Facts.Hostname).To(Equal("hh-0"))
		g.Expect(h.Status.Facts.CPUs).To(BeNumerically(">", 0))
		g.Expect(h.Status.LastProbeTime).NotTo(BeNil())
		g.Expect(h.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
		g.Expect(h.Finalizers).To(ContainElement(infrav1.HostFinalizer))
		s := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "key"}, s)).To(Succeed())
		g.Expect(s.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
	}).Should(Succeed())

	// Recorded, the key is enforced: sshd now presents another key (a reinstalled or impostor host).
	patch := client.MergeFrom(h.DeepCopy())
	h.Spec.HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	g.Expect(env.Patch(ctx, h, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseError))
		g.Expect(h.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.YonderSSHHostReachableCondition), HaveField("Reason", infrav1.HostKeyMismatchReason))))
	}).Should(Succeed())

	// A claimed host is not deleted until released.
	h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "m", UID: "u"}
	g.Expect(env.Update(ctx, h)).To(Succeed())
	g.Expect(env.Delete(ctx, h)).To(Succeed())
	g.Consistently(func() error { return env.Get(ctx, client.ObjectKeyFromObject(h), &infrav1.YonderSSHHost{}) }, "2s").Should(Succeed())
	g.Eventually(func() error {
		cur := &infrav1.YonderSSHHost{}
		if err := env.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
			return err
		}
		cur.Spec.ConsumerRef = nil
		return env.Update(ctx, cur)
	}).Should(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(h), &infrav1.YonderSSHHost{}))
	}).Should(BeTrue())

	// Nobody listening: Unreachable.
	dead := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dead"},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: hs[0].Address.String(), Port: 2, CredentialsSecretRef: infrav1.SecretReference{Name: "key"},
			HostKey: sshexec.FormatHostKey(hs[0].HostKey)}}}
	g.Expect(env.Create(ctx, dead)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(dead), dead)).To(Succeed())
		g.Expect(dead.Status.Phase).To(Equal(infrav1.HostPhaseUnreachable))
	}).Should(Succeed())
}
