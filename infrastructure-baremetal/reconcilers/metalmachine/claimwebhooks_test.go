package metalmachine_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
)

// causes returns "field: reason" for every field error of an Invalid error from the API server.
func causes(g Gomega, err error) []string {
	var se *apierrors.StatusError
	g.Expect(errors.As(err, &se)).To(BeTrue(), "an API status error, got %v", err)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "Invalid, got %v", err)
	out := []string{}
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, c.Field+": "+string(c.Type))
	}
	return out
}

// Issue 19: a YonderMetalMachine cannot take another machine's claim identity. Created with the identity
// of a claim that a BareMetalHost records for another machine (or a made-up one), given one on update
// that is not its own UID, or changing or dropping a recorded one — each is refused by the webhook, with
// the annotation named. The legitimate writers pass: clusterctl move creating the machine with the
// identity its host records for it under its own name, clusterctl move's delete-for-move patch of the
// source (which drops every annotation), and the controller recording the machine's own UID.
func TestClaimIdentityIsNotUserWritable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "claimid").Name
	registerHosts(g, ns, hostSpec{Name: "victims-host", Consumer: &corev1.ObjectReference{
		APIVersion: infrav1.GroupVersion.String(), Kind: hostpool.ConsumerKind, Namespace: ns, Name: "victim", UID: "victim-uid"}})
	annPath := "metadata.annotations[" + infrav1.ClaimIDAnnotation + "]"
	machine := func(name, id string) *infrav1.YonderMetalMachine {
		m := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: infrav1.YonderMetalMachineSpec{Image: testImage()}}
		if id != "" {
			m.Annotations = map[string]string{infrav1.ClaimIDAnnotation: id}
		}
		return m
	}

	// Forged on create: another machine's identity, or one no host records.
	err := env.Create(ctx, machine("thief", "victim-uid"))
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("no BareMetalHost in namespace " + ns + " records a claim by thief under identity victim-uid")))
	g.Expect(causes(g, env.Create(ctx, machine("thief", "made-up")))).To(ConsistOf(annPath + ": FieldValueForbidden"))

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

	// Set on update: only the object's own UID (what the controller records at its first reservation).
	plain := machine("plain", "")
	g.Expect(env.Create(ctx, plain)).To(Succeed())
	plain.Annotations = map[string]string{infrav1.ClaimIDAnnotation: "victim-uid"}
	err = env.Update(ctx, plain)
	g.Expect(causes(g, err)).To(ConsistOf(annPath + ": FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("cannot name another identity")))
	plain.Annotations[infrav1.ClaimIDAnnotation] = string(plain.UID)
	g.Expect(env.Update(ctx, plain)).To(Succeed())
}
