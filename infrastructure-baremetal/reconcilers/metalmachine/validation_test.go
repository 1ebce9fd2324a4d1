package metalmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// Bad input is refused by the API server itself (CRD schema and the provider's webhooks), with messages
// that say what to change, before any host is claimed.
func TestAPIServerRejectsBadMachines(t *testing.T) {
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "val").Name
	for _, tc := range []struct {
		name string
		spec infrav1.YonderMetalMachineSpec
		err  string
	}{
		{"no image", infrav1.YonderMetalMachineSpec{}, "set image (or customDeploy)"},
		{"ftp url", infrav1.YonderMetalMachineSpec{Image: &infrav1.Image{URL: "ftp://x/y", Format: "live-iso"}}, "spec.image.url"},
		{"unknown format", infrav1.YonderMetalMachineSpec{Image: &infrav1.Image{URL: "http://x/y", Format: "vhd"}}, "spec.image.format"},
		{"no checksum", infrav1.YonderMetalMachineSpec{Image: &infrav1.Image{URL: "http://x/y", Format: "raw"}}, "a checksum is required"},
		{"unknown cleaning", infrav1.YonderMetalMachineSpec{Image: &infrav1.Image{URL: "http://x/y", Format: "live-iso"}, AutomatedCleaningMode: "full"}, "spec.automatedCleaningMode"},
		{"unknown custom deploy method", infrav1.YonderMetalMachineSpec{CustomDeploy: &infrav1.CustomDeploy{Method: "install_coreos"}},
			`spec.template.spec.customDeploy.method: Unsupported value: "install_coreos": supported values: "yonder-diskless"`},
		{"diskless and an image", infrav1.YonderMetalMachineSpec{CustomDeploy: &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod},
			Image: &infrav1.Image{URL: "http://x/y.iso", Format: "live-iso"}}, "set either image or customDeploy, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := env.Create(ctx, &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "t-"},
				Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: tc.spec}}})
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
	g := NewWithT(t)
	diskless := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "diskless"},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			CustomDeploy: &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}}}}}
	g.Expect(env.Create(ctx, diskless)).To(Succeed())
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			Image: &infrav1.Image{URL: "http://x/y.iso", Format: "live-iso"}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	tmpl.Spec.Template.Spec.Image.URL = "http://x/z.iso"
	g.Expect(env.Update(ctx, tmpl)).To(MatchError(ContainSubstring("create a new template")))
}
