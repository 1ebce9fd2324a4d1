package metal

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/stack"
)

// TestMetalFlavors puts every metal flavor of the local clusterctl repository through the management
// cluster this stack runs with the metal provider (test/e2e's TestClusterctlRepository does the same for
// the ssh flavors): metal, metal-gpu and metal-kubeadm with a server-side dry run (schemas, CAPI's webhooks,
// CABPK's for metal-kubeadm's KubeadmConfigTemplate, and ours)
// with their default disk image (qcow2, cleaned when released) and with a live image, metal-clusterclass
// created for real with no replicas, so CAPI's topology webhook validates its variables and the topology
// controller renders both worker classes through the yonder-metal class's patches. A disk image without
// a checksum (the defaults with only the URL set) is refused by our webhook.
func TestMetalFlavors(t *testing.T) {
	ctx := context.Background()
	const imageURL = "http://images.example/debian-cloud.qcow2"
	checksum := "YONDER_METAL_IMAGE_CHECKSUM=" + strings.Repeat("ab", 32)
	generate := func(t *testing.T, flavor string, env ...string) []*unstructured.Unstructured {
		t.Helper()
		out, err := st.ClusterctlOffline(ctx, append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret,
			"YONDER_METAL_IMAGE_URL=" + imageURL}, env...),
			"generate", "cluster", "edge", "--infrastructure", "yonder-metal:v0.1.0", "--flavor", flavor,
			"--kubernetes-version", stack.KubernetesVersion, "--target-namespace", "default", "--worker-machine-count", "2")
		if err != nil {
			t.Fatal(err)
		}
		objs, err := flavorcheck.Decode([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	for _, flavor := range []string{"metal", "metal-gpu", "metal-kubeadm"} {
		t.Run(flavor, func(t *testing.T) {
			// The GPU pool's image and checksum default to the general ones.
			objs := generate(t, flavor, checksum)
			g := NewWithT(t)
			n := 0
			for _, o := range objs {
				if o.GetKind() != "YonderMetalMachineTemplate" {
					continue
				}
				n++
				tmpl := &infrav1.YonderMetalMachineTemplate{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, tmpl)).To(Succeed())
				g.Expect(tmpl.Spec.Template.Spec.Image.Format).To(Equal(infrav1.ImageFormat("qcow2")), "the default: a disk image, so the hosts become Nodes")
				g.Expect(tmpl.Spec.Template.Spec.AutomatedCleaningMode).To(Equal(infrav1.AutomatedCleaningMode("metadata")), "a released host's disks are wiped")
				g.Expect(tmpl.Spec.Template.Spec.Image.Checksum).To(Equal(strings.Repeat("ab", 32)))
			}
			g.Expect(n).To(BeNumerically(">=", 1))
			flavorcheck.DryRun(ctx, t, st.Client, flavorcheck.Namespace(ctx, t, st.Client, "tpl-"+flavor), objs)
		})
	}
	t.Run("metal/live-iso", func(t *testing.T) {
		objs := generate(t, "metal", "YONDER_METAL_IMAGE_FORMAT=live-iso", "YONDER_METAL_CLEANING_MODE=disabled")
		flavorcheck.DryRun(ctx, t, st.Client, flavorcheck.Namespace(ctx, t, st.Client, "tpl-metal-live"), objs)
	})
	t.Run("metal/disk-image-without-checksum", func(t *testing.T) {
		g := NewWithT(t)
		ns := flavorcheck.Namespace(ctx, t, st.Client, "tpl-metal-bad")
		n := 0
		for _, o := range generate(t, "metal") {
			if o.GetKind() != "YonderMetalMachineTemplate" {
				continue
			}
			n++
			o.SetNamespace(ns)
			g.Expect(st.Client.Create(ctx, o, client.DryRunAll)).To(MatchError(ContainSubstring("a checksum is required")))
		}
		g.Expect(n).To(Equal(1))
	})
	t.Run("metal-clusterclass", func(t *testing.T) {
		objs := generate(t, "metal-clusterclass", "YONDER_GPU_MACHINE_COUNT=1", checksum)
		g := NewWithT(t)
		g.Expect(flavorcheck.Kinds(objs)).To(HaveKeyWithValue("ClusterClass", 1))
		ns := flavorcheck.Namespace(ctx, t, st.Client, "tpl-metal-cc")
		seen := map[string]bool{}
		flavorcheck.Topology(ctx, t, st, ns, "imageFormat", objs, func(g Gomega, name string, bootstrap, infra *unstructured.Unstructured) {
			seen[name] = true
			tmpl := &infrav1.YonderMetalMachineTemplate{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(infra.Object, tmpl)).To(Succeed())
			spec := tmpl.Spec.Template.Spec
			g.Expect(spec.Image).NotTo(BeNil())
			g.Expect(spec.Image.URL).To(Equal(imageURL), "the imageURL variable replaces the class's placeholder")
			g.Expect(spec.Image.Format).To(Equal(infrav1.ImageFormat("qcow2")), "the imageFormat variable's default")
			g.Expect(spec.Image.Checksum).To(Equal(strings.Repeat("ab", 32)))
			g.Expect(spec.AutomatedCleaningMode).To(Equal(infrav1.AutomatedCleaningMode("metadata")), "the cleaningMode variable's default")
			taints, _, _ := unstructured.NestedSlice(bootstrap.Object, "spec", "template", "spec", "nodeTaints")
			labels, _, _ := unstructured.NestedStringMap(bootstrap.Object, "spec", "template", "spec", "nodeLabels")
			switch name {
			case "md-0":
				g.Expect(spec.HostSelector.MatchExpressions).To(ConsistOf(metav1.LabelSelectorRequirement{Key: "metal.yonder.dev/gpu-count", Operator: metav1.LabelSelectorOpDoesNotExist}))
				g.Expect(taints).To(BeEmpty())
			case "md-gpu":
				g.Expect(spec.HostSelector.MatchExpressions).To(ContainElement(metav1.LabelSelectorRequirement{Key: "metal.yonder.dev/gpu-vendor", Operator: metav1.LabelSelectorOpIn, Values: []string{"nvidia"}}))
				g.Expect(taints).To(ConsistOf(map[string]any{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}))
				g.Expect(labels).To(HaveKeyWithValue("nvidia.com/gpu.present", "true"))
			default:
				g.Expect(name).To(BeElementOf("md-0", "md-gpu"))
			}
		})
		g.Expect(seen).To(HaveLen(2))
	})
}
