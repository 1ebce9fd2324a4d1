package baremetalhost

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// The GPU labels follow each inspection: count and a normalised vendor, no vendor when GPUs of several
// vendors are mixed, both removed when a later inspection finds none (e.g. the cards were pulled).
func TestSetGPULabels(t *testing.T) {
	g := NewWithT(t)
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ManagedLabel: "true"}}}

	setGPULabels(h, []redfish.GPU{{Vendor: "NVIDIA Corporation"}, {Vendor: "NVIDIA"}, {Vendor: "nvidia"}})
	g.Expect(h.Labels).To(Equal(map[string]string{ManagedLabel: "true", GPUCountLabel: "3", GPUVendorLabel: "nvidia"}))

	setGPULabels(h, []redfish.GPU{{Vendor: "NVIDIA"}, {Vendor: "Advanced Micro Devices, Inc. [AMD/ATI]"}})
	g.Expect(h.Labels).To(Equal(map[string]string{ManagedLabel: "true", GPUCountLabel: "2"}))

	setGPULabels(h, nil)
	g.Expect(h.Labels).To(Equal(map[string]string{ManagedLabel: "true"}))

	// A host without labels at all (only possible for a host being forgotten) gets a map.
	bare := &metal3v1.BareMetalHost{}
	setGPULabels(bare, []redfish.GPU{{Vendor: "Intel(R) Corporation"}})
	g.Expect(bare.Labels).To(Equal(map[string]string{GPUCountLabel: "1", GPUVendorLabel: "intel"}))
}

func TestGPUVendor(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA":                                 "nvidia",
		"Advanced Micro Devices, Inc. [AMD/ATI]": "amd",
		"AMD":                                    "amd",
		"Intel Corporation":                      "intel",
		"Habana Labs Ltd.":                       "habana-labs-ltd",
		"  ":                                     "",
		"Ünïcode GPU Maker (TM)":                 "n-code-gpu-maker-tm",
	} {
		if got := gpuVendor(in); got != want {
			t.Errorf("gpuVendor(%q) = %q, want %q", in, got, want)
		}
	}
}
