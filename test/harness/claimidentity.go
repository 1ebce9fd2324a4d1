package harness

import (
	"context"
	"errors"

	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldCauses returns "field: reason" for every field error of an Invalid error from the API server.
func FieldCauses(g gomega.Gomega, err error) []string {
	var se *apierrors.StatusError
	g.Expect(errors.As(err, &se)).To(gomega.BeTrue(), "an API status error, got %v", err)
	g.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "Invalid, got %v", err)
	out := []string{}
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, c.Field+": "+string(c.Type))
	}
	return out
}

// ClaimIdentityCase is one infrastructure provider's side of ExpectClaimIdentityNotUserWritable.
type ClaimIdentityCase struct {
	// Namespace holds a host of HostKind whose claim records consumer "victim" with identity "victim-uid".
	Namespace, HostKind string
	// Annotation is the provider's claim-id annotation.
	Annotation string
	// Machine returns a new infrastructure machine in Namespace, with the claim-id annotation id when not empty.
	Machine func(name, id string) client.Object
}

// ExpectClaimIdentityNotUserWritable checks a provider's machine webhook (issue 19; pkg/claim's identity
// rules, wired by pkg/webhooks.ClaimIdentity): a machine created with the identity a host records for
// another machine (or a made-up one), given one on update that is not its own UID, or changing or dropping
// a recorded one, is refused with the annotation named. The legitimate writers pass: clusterctl move
// creating the machine with the identity its host records for it under its own name, clusterctl move's
// delete-for-move patch of the source (which replaces every annotation), and the controller recording the
// machine's own UID.
func ExpectClaimIdentityNotUserWritable(ctx context.Context, g gomega.Gomega, c client.Client, tc ClaimIdentityCase) {
	annPath := "metadata.annotations[" + tc.Annotation + "]"
	forbidden := gomega.ConsistOf(annPath + ": FieldValueForbidden")

	// Forged on create: another machine's identity, or one no host records.
	err := c.Create(ctx, tc.Machine("thief", "victim-uid"))
	g.Expect(FieldCauses(g, err)).To(forbidden)
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("no " + tc.HostKind + " in namespace " + tc.Namespace + " records a claim by thief under identity victim-uid")))
	g.Expect(FieldCauses(g, c.Create(ctx, tc.Machine("thief", "made-up")))).To(forbidden)

	// Moved: the host records this name under this identity.
	moved := tc.Machine("victim", "victim-uid")
	g.Expect(c.Create(ctx, moved)).To(gomega.Succeed())
	moved.SetAnnotations(map[string]string{tc.Annotation: "other"})
	err = c.Update(ctx, moved)
	g.Expect(FieldCauses(g, err)).To(forbidden)
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("the claim identity victim-uid is recorded by the controller and cannot be changed or removed")))
	moved.SetAnnotations(nil)
	g.Expect(FieldCauses(g, c.Update(ctx, moved))).To(forbidden)

	// clusterctl move, done with the source: it replaces the whole annotation map with its
	// delete-for-move marker (the very patch it sends) before deleting the object.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(moved), moved)).To(gomega.Succeed())
	deleteForMove := client.RawPatch(types.JSONPatchType, []byte(`[{"op": "add", "path":"/metadata/annotations", "value":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}]`))
	g.Expect(c.Patch(ctx, moved, deleteForMove)).To(gomega.Succeed())
	g.Expect(moved.GetAnnotations()).To(gomega.Equal(map[string]string{clusterctlv1.DeleteForMoveAnnotation: ""}))
	g.Expect(c.Delete(ctx, moved)).To(gomega.Succeed())

	// Set on update: only the object's own UID (what the controller records at its first reservation).
	plain := tc.Machine("plain", "")
	g.Expect(c.Create(ctx, plain)).To(gomega.Succeed())
	plain.SetAnnotations(map[string]string{tc.Annotation: "victim-uid"})
	err = c.Update(ctx, plain)
	g.Expect(FieldCauses(g, err)).To(forbidden)
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("cannot name another identity")))
	plain.SetAnnotations(map[string]string{tc.Annotation: string(plain.GetUID())})
	g.Expect(c.Update(ctx, plain)).To(gomega.Succeed())
}
