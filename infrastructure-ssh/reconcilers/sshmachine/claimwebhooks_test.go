package sshmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/harness"
)

const testHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

func claimedHost(g *WithT, ns, name, consumer, uid string) *infrav1.YonderSSHHost {
	ctx := context.Background()
	h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: "10.0.0.1", CredentialsSecretRef: infrav1.SecretReference{Name: "s"}, HostKey: testHostKey}}}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: consumer, UID: uid}
	g.Expect(env.Update(ctx, h)).To(Succeed())
	return h
}

// A YonderSSHMachine cannot take another machine's claim identity: created with the identity of a claim
// that a host records for another machine, given one on update that is not its own UID, or changing or
// dropping a recorded one — each is refused by the webhook. A machine created with the identity its host
// records for it under its own name (what clusterctl move does) is accepted, and so is clusterctl move's
// marking of the source object for deletion, which drops every annotation.
func TestClaimIdentityIsNotUserWritable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "claimid").Name
	claimedHost(g, ns, "victims-host", "victim", "victim-uid")
	machine := func(name, id string) *infrav1.YonderSSHMachine {
		m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if id != "" {
			m.Annotations = map[string]string{infrav1.ClaimIDAnnotation: id}
		}
		return m
	}
	harness.ExpectClaimIdentityNotUserWritable(ctx, g, env, harness.ClaimIdentityCase{
		Namespace: ns, HostKind: "YonderSSHHost", Annotation: infrav1.ClaimIDAnnotation,
		Machine: func(name, id string) client.Object { return machine(name, id) },
	})
}

// While a YonderSSHHost is claimed, what it is reached by — address, port, user, credentials, host key
// and policy — cannot change (one field error each), not even in the update that releases it; once free
// it can. A recorded host key is never cleared into trust on first use without an explicit change of
// hostKeyPolicy from Pinned.
func TestClaimedHostIsImmutable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "claimedhost").Name
	h := claimedHost(g, ns, "h", "m", "m-uid")
	edit := func(h *infrav1.YonderSSHHost) {
		h.Spec.Address = "10.0.0.2"
		h.Spec.Port = 2222
		h.Spec.User = "admin"
		h.Spec.CredentialsSecretRef.Name = "other"
		h.Spec.HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHlvbmRlci1vdGhlci1ob3N0LWtleS0wMDAwMDAwMDAw"
	}
	const forbidden = ": FieldValueForbidden"
	want := []string{"spec.address" + forbidden, "spec.port" + forbidden, "spec.user" + forbidden, "spec.credentialsSecretRef" + forbidden, "spec.hostKey" + forbidden}
	changed := h.DeepCopy()
	edit(changed)
	err := env.Update(ctx, changed)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf(want))
	g.Expect(err).To(MatchError(ContainSubstring("cannot change while the host is claimed by a machine; delete its Machine first")))
	changed = h.DeepCopy()
	changed.Spec.HostKey = ""
	changed.Spec.HostKeyPolicy = infrav1.HostKeyPolicyTrustOnFirstUse
	g.Expect(harness.FieldCauses(g, env.Update(ctx, changed))).To(ConsistOf("spec.hostKey"+forbidden, "spec.hostKeyPolicy"+forbidden))
	released := h.DeepCopy()
	released.Spec.ConsumerRef = nil
	edit(released)
	g.Expect(harness.FieldCauses(g, env.Update(ctx, released))).To(ConsistOf(want), "the release does not carry an edit")

	// Released, the host can be edited.
	h.Spec.ConsumerRef = nil
	g.Expect(env.Update(ctx, h)).To(Succeed())
	edit(h)
	g.Expect(env.Update(ctx, h)).To(Succeed())

	// Clearing a pinned key alone is refused (no key, no policy that records one); together with the
	// switch from Pinned to TrustOnFirstUse it is the explicit way to re-arm trust on first use.
	cleared := h.DeepCopy()
	cleared.Spec.HostKey = ""
	g.Expect(harness.FieldCauses(g, env.Update(ctx, cleared))).To(ConsistOf("spec.hostKey: FieldValueRequired"))
	cleared.Spec.HostKeyPolicy = infrav1.HostKeyPolicyTrustOnFirstUse
	g.Expect(env.Update(ctx, cleared)).To(Succeed())

	// A key set under TrustOnFirstUse (by hand, or recorded before the controller pinned recorded keys)
	// cannot be cleared silently.
	tofu := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tofu"},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: "10.0.0.3", CredentialsSecretRef: infrav1.SecretReference{Name: "s"},
			HostKey: testHostKey, HostKeyPolicy: infrav1.HostKeyPolicyTrustOnFirstUse}}}
	g.Expect(env.Create(ctx, tofu)).To(Succeed())
	tofu.Spec.HostKey = ""
	err = env.Update(ctx, tofu)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("spec.hostKey" + forbidden))
	g.Expect(err).To(MatchError(ContainSubstring("would trust whatever key the host presents next")))
}
