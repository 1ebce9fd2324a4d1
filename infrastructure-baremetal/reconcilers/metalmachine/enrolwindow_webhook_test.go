package metalmachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/harness"
)

// Issue 17: the API server refuses a managed host's TPM enrolment window that stays open longer than
// infrav1.MaxEnrolmentWindow (the cap `kubectl yonder host enrol` has), whether the host is created
// with it or it is annotated later (a plain `kubectl annotate` bypasses the CLI), and one that is not a
// deadline; a bounded window is accepted, and closing it is always allowed.
func TestBareMetalHostEnrolmentWindowIsBoundedByTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "enrol-window").Name
	deadline := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

	week := managedHost(ns, "week", "52:54:00:a7:02:01")
	week.Annotations = map[string]string{baremetalhost.EnrolmentWindowAnnotation: deadline(7 * 24 * time.Hour)}
	err := env.Create(ctx, week)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("metadata.annotations[metal.yonder.dev/tpm-enrolment-window]: FieldValueInvalid"))
	g.Expect(err).To(MatchError(ContainSubstring("the TPM enrolment window may stay open for at most " + infrav1.MaxEnrolmentWindow.String())))

	h := managedHost(ns, "h", "52:54:00:a7:02:02")
	h.Annotations = map[string]string{baremetalhost.EnrolmentWindowAnnotation: deadline(time.Hour)}
	g.Expect(env.Create(ctx, h)).To(Succeed(), "an hour")

	h.Annotations[baremetalhost.EnrolmentWindowAnnotation] = deadline(infrav1.MaxEnrolmentWindow + time.Hour)
	g.Expect(env.Update(ctx, h)).To(MatchError(ContainSubstring("may stay open for at most")), "moved past the cap")
	h.Annotations[baremetalhost.EnrolmentWindowAnnotation] = "until further notice"
	g.Expect(env.Update(ctx, h)).To(MatchError(ContainSubstring("must be an RFC 3339 deadline")))
	h.Annotations[baremetalhost.EnrolmentWindowAnnotation] = deadline(infrav1.MaxEnrolmentWindow - time.Minute)
	g.Expect(env.Update(ctx, h)).To(Succeed(), "within the cap")
	delete(h.Annotations, baremetalhost.EnrolmentWindowAnnotation)
	g.Expect(env.Update(ctx, h)).To(Succeed(), "closed")
}
