package enrol

import (
	"bytes"
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
)

// The plugin writes the provider's annotations (it does not link the provider: the names are repeated).
func TestAnnotationNamesAreTheProviders(t *testing.T) {
	g := NewWithT(t)
	g.Expect(WindowAnnotation).To(Equal(baremetalhost.EnrolmentWindowAnnotation))
	g.Expect(PinnedAnnotation).To(Equal(baremetalhost.EnrolmentAnnotation))
	g.Expect(EKSHA256Annotation).To(Equal(baremetalhost.EKFingerprintAnnotation))
	g.Expect(managedLabel).To(Equal(baremetalhost.ManagedLabel))
}

// `host enrol h --for 45m` opens the window until now+45m (RFC 3339), `--close` removes it; a host that is
// not Yonder's, one whose TPM is pinned, and an unbounded window are refused and change nothing.
func TestEnrolOpensABoundedWindow(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "enrol").Name
	mk := func(name string, labels, annotations map[string]string) *metal3v1.BareMetalHost {
		h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
			Spec: metal3v1.BareMetalHostSpec{BootMACAddress: "52:54:00:60:00:01"}}
		g.Expect(env.Create(ctx, h)).To(Succeed())
		return h
	}
	managed := map[string]string{managedLabel: "true"}
	h := mk("h1", managed, nil)
	foreign := mk("metal3s", nil, nil)
	pinned := mk("pinned", managed, map[string]string{PinnedAnnotation: `{"EKPublic":"AA=="}`})
	get := func(h *metal3v1.BareMetalHost) map[string]string {
		cur := &metal3v1.BareMetalHost{}
		g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), cur)).To(Succeed())
		return cur.Annotations
	}
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	run := func(ref string, eo Options) (string, error) {
		out := &bytes.Buffer{}
		o := cli.NewOptions().WithConfig(env.Config, ns)
		o.Out, o.ErrOut = out, &bytes.Buffer{}
		eo.Now = func() time.Time { return now }
		err := eo.Run(ctx, o, ref)
		return out.String(), err
	}

	out, err := run("h1", Options{For: 45 * time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("BareMetalHost " + ns + "/h1: TPM enrolment window open until 2026-12-01T17:45:00Z\n"))
	g.Expect(get(h)).To(HaveKeyWithValue(WindowAnnotation, "2026-12-01T17:45:00Z"))

	out, err = run(ns+"/h1", Options{Close: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("window closed"))
	g.Expect(get(h)).NotTo(HaveKey(WindowAnnotation))

	_, err = run("h1", Options{For: 48 * time.Hour})
	g.Expect(err).To(MatchError(ContainSubstring("at most 24h0m0s")))
	_, err = run("metal3s", Options{For: time.Hour})
	g.Expect(err).To(MatchError(ContainSubstring("is not managed by Yonder")))
	_, err = run("pinned", Options{For: time.Hour})
	g.Expect(err).To(MatchError(ContainSubstring("already has a pinned TPM")))
	_, err = run("missing", Options{For: time.Hour})
	g.Expect(err).To(MatchError(ContainSubstring("does not exist")))
	g.Expect(get(h)).NotTo(HaveKey(WindowAnnotation))
	g.Expect(get(foreign)).NotTo(HaveKey(WindowAnnotation))
	g.Expect(get(pinned)).NotTo(HaveKey(WindowAnnotation))
}
