package lab

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The add-on's pods reach the API server at its address (the lab's nodes run no kube-proxy, so the
// kubernetes Service's ClusterIP leads nowhere), ahead of any env of their own; nothing else changes, and
// the images are the ones the lab builds.
func TestAddonObjectsReachTheAPIServerDirectly(t *testing.T) {
	g := NewWithT(t)
	objs, err := addonObjects("https://10.250.7.1:41234")
	g.Expect(err).NotTo(HaveOccurred())
	workloads := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		workloads++
		cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cs).NotTo(BeEmpty())
		for _, c := range cs {
			env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
			g.Expect(len(env)).To(BeNumerically(">=", 2))
			g.Expect(env[0]).To(Equal(map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "10.250.7.1"}))
			g.Expect(env[1]).To(Equal(map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "41234"}))
			img, _, _ := unstructured.NestedString(c.(map[string]any), "image")
			g.Expect(img).To(BeElementOf(imageRegistry+"/yonder-net-controller:"+imageTag, imageRegistry+"/yonder-net-node:"+imageTag))
		}
	}
	g.Expect(workloads).To(Equal(2), "the controller Deployment and the node DaemonSet")
	_, err = addonObjects("://no-url")
	g.Expect(err).To(MatchError(ContainSubstring("failed to parse the workload API server URL")))
}
