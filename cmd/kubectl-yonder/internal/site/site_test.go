package site

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/controlplane"
)

func TestManifestsHoldTheWholeAddOn(t *testing.T) {
	g := NewWithT(t)
	objs, err := Objects()
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	g.Expect(kinds).To(HaveKey("Namespace"))
	g.Expect(kinds).To(HaveKey("Deployment"))
	g.Expect(kinds).To(HaveKey("DaemonSet"))
	g.Expect(kinds).To(HaveKey("ValidatingWebhookConfiguration"))
	g.Expect(kinds["CustomResourceDefinition"]).To(BeNumerically(">=", 5))
}

// site init against a real apiserver: everything applied, CRDs established, and a second run changes nothing.
func TestInitAppliesTheAddOnIdempotently(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "site-init"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })

	out := &bytes.Buffer{}
	o := cli.NewOptions().WithConfig(cp.Config, "")
	o.Out, o.ErrOut = out, &bytes.Buffer{}
	g.Expect(Init(ctx, o, &InitOptions{Timeout: 30e9})).To(Succeed())
	objs, _ := Objects()
	g.Expect(bytes.Count(out.Bytes(), []byte(" applied\n"))).To(Equal(len(objs)))

	c, err := o.Client()
	g.Expect(err).NotTo(HaveOccurred())
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	g.Expect(c.List(ctx, crds)).To(Succeed())
	var ours int
	for _, crd := range crds.Items {
		if crd.Spec.Group == "network.yonder.dev" {
			ours++
		}
	}
	g.Expect(ours).To(BeNumerically(">=", 5))
	deps := &appsv1.DeploymentList{}
	g.Expect(c.List(ctx, deps, client.InNamespace("yonder-network"))).To(Succeed())
	g.Expect(deps.Items).NotTo(BeEmpty())
	rv := deps.Items[0].ResourceVersion
	whs := &admissionv1.ValidatingWebhookConfigurationList{}
	g.Expect(c.List(ctx, whs)).To(Succeed())
	g.Expect(whs.Items).NotTo(BeEmpty())

	g.Expect(Init(ctx, o, &InitOptions{Timeout: 30e9})).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&deps.Items[0]), &deps.Items[0])).To(Succeed())
	g.Expect(deps.Items[0].ResourceVersion).To(Equal(rv), "re-applying the same manifests changes nothing")

	out.Reset()
	g.Expect(Init(ctx, o, &InitOptions{DryRun: true})).To(Succeed())
	g.Expect(out.Bytes()).To(Equal(Manifests))
}
