package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/yonder-dev/yonder/test/testbins"
)

// The lab's metal pool is the metal flavor's worker pool as released: templates, MachineDeployment,
// remediation template and MachineHealthCheck, all renamed lab-metal-0 and still pointing at each other.
func TestMetalPoolObjectsAdaptTheFlavor(t *testing.T) {
	g := NewWithT(t)
	flavor, err := os.ReadFile(filepath.Join(testbins.RepoRoot(), "templates", "cluster-template-metal.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := metalPoolObjects([]byte(strings.ReplaceAll(string(flavor), "${CLUSTER_NAME}", ClusterName)))
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		g.Expect(o.GetName()).To(Equal(MetalPool))
		kinds[o.GetKind()] = o
	}
	g.Expect(kinds).To(HaveLen(5))
	g.Expect(kinds).To(HaveKey("YonderMetalRemediationTemplate"))
	mhc := kinds["MachineHealthCheck"]
	g.Expect(mhc).NotTo(BeNil())
	sel, _, _ := unstructured.NestedString(mhc.Object, "spec", "selector", "matchLabels", "cluster.x-k8s.io/deployment-name")
	g.Expect(sel).To(Equal(MetalPool), "the health check watches the lab's metal pool")
	ref, _, _ := unstructured.NestedString(mhc.Object, "spec", "remediation", "templateRef", "name")
	g.Expect(ref).To(Equal(MetalPool), "and remediates through its renamed template")
	infra, _, _ := unstructured.NestedString(kinds["MachineDeployment"].Object, "spec", "template", "spec", "infrastructureRef", "name")
	g.Expect(infra).To(Equal(MetalPool))
}
