package sshmachine_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

const testHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

// causes returns "field: reason" for every field error of an Invalid error from the API server.
func causes(g *WithT, err error) []string {
	var se *apierrors.StatusError
	g.Expect(errors.As(err, &se)).To(BeTrue(), "an API status error, got %v", err)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "Invalid, got %v", err)
	out := []string{}
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, c.Field+": "+string(c.Type))
	}
	return out
}

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
	annPath := "metadata.annotations[" + infrav1.ClaimIDAnnotation + "]"
	machine := func(name, id string) *infrav1.YonderSSHMachine {
		m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if id != "" {
			m.Annotations = map[string]string{infrav1.ClaimIDAnnotation: id}
		}
		return m
	}

	// Forged: another machine's identity.
	err := env.Create(ctx, machine("thief", "victim-uid"))
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("no YonderSSHHost in namespace " + ns + " records a claim by thief under identity victim-uid")))
	err = env.Create(ctx, machine("thief", "made-up"))
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))

	// Moved: the host records this name under this identity.
	moved := machine("victim", "victim-uid")
	g.Expect(env.Create(ctx, moved)).To(Succeed())
	moved.Annotations[infrav1.ClaimIDAnnotation] = "other"
	err = env.Update(ctx, moved)
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("the claim identity victim-uid is recorded by the controller and cannot be changed or removed")))
	delete(moved.Annotations, infrav1.ClaimIDAnnotation)
	g.Expect(causes(g, env.Update(ctx, moved))).To(ConsistOf(annPath + ": FieldValueForbidden"))

	// clusterctl move, done with the source: it replaces the whole annotation map with its
	// delete-for-move marker (the very patch it sends) before deleting the object.
	g.Expect(env.Get(ctx, client.ObjectKeyFromObject(moved), moved)).To(Succeed())
	deleteForMove := client.RawPatch(types.JSONPatchType, []byte(`[{"op": "add", "path":"/metadata/annotations", "value":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}]`))
	g.Expect(env.Patch(ctx, moved, deleteForMove)).To(Succeed())
	g.Expect(moved.Annotations).To(Equal(map[string]string{clusterctlv1.DeleteForMoveAnnotation: ""}))
	g.Expect(env.Delete(ctx, moved)).To(Succeed())

	// Set later: only the object's own UID (what the controller records at its first reservation).
	plain := machine("plain", "")
	g.Expect(env.Create(ctx, plain)).To(Succeed())
	plain.Annotations = map[string]string{infrav1.ClaimIDAnnotation: "victim-uid"}
	err = env.Update(ctx, plain)
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("cannot name another identity")))
	plain.Annotations[infrav1.ClaimIDAnnotation] = string(plain.UID)
	g.Expect(env.Update(ctx, plain)).To(Succeed())
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
	g.Expect(causes(g, err)).To(ConsistOf(want))
	g.Expect(err).To(MatchError(ContainSubstring("cannot change while the host is claimed by a machine; delete its Machine first")))
	changed = h.DeepCopy()
	changed.Spec.HostKey = ""
	changed.Spec.HostKeyPolicy = infrav1.HostKeyPolicyTrustOnFirstUse
	g.Expect(causes(g, env.Update(ctx, changed))).To(ConsistOf("spec.hostKey"+forbidden, "spec.hostKeyPolicy"+forbidden))
	released := h.DeepCopy()
	released.Spec.ConsumerRef = nil
	edit(released)
	g.Expect(causes(g, env.Update(ctx, released))).To(ConsistOf(want), "the release does not carry an edit")

	// Released, the host can be edited.
	h.Spec.ConsumerRef = nil
	g.Expect(env.Update(ctx, h)).To(Succeed())
	edit(h)
	g.Expect(env.Update(ctx, h)).To(Succeed())

	// Clearing a pinned key alone is refused (no key, no policy that records one); together with the
	// switch from Pinned to TrustOnFirstUse it is the explicit way to re-arm trust on first use.
	cleared := h.DeepCopy()
	cleared.Spec.HostKey = ""
	g.Expect(causes(g, env.Update(ctx, cleared))).To(ConsistOf("spec.hostKey: FieldValueRequired"))
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
	g.Expect(causes(g, err)).To(ConsistOf("spec.hostKey" + forbidden))
	g.Expect(err).To(MatchError(ContainSubstring("would trust whatever key the host presents next")))
}
