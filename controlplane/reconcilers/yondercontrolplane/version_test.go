package yondercontrolplane_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// The user story: a ClusterClass topology sets spec.version. The attached cluster is never upgraded by
// Yonder; the condition says whether it runs what was asked, and a bad version is refused by the API.
func TestSpecVersionIsComparedWithTheAttachedCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "version")
	_, cp := attach(ctx, g, ns.Name, "ver", workload.AdminKubeconfig, true)

	g.Eventually(func(g Gomega) {
		got := getCP(ctx, g, cp)
		g.Expect(got.Status.Version).To(MatchRegexp(`^v1\.36\.\d+$`))
		c := conditions.Get(got, controlplanev1.YonderControlPlaneVersionUpToDateCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controlplanev1.YonderControlPlaneVersionNotRequestedReason))
	}).Should(Succeed())

	setVersion := func(v string) error {
		got := getCP(ctx, g, cp)
		base := got.DeepCopy()
		got.Spec.Version = v
		return env.Patch(ctx, got, client.MergeFrom(base))
	}
	g.Expect(setVersion("v1.99.0")).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := conditions.Get(getCP(ctx, g, cp), controlplanev1.YonderControlPlaneVersionUpToDateCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(controlplanev1.YonderControlPlaneVersionUpgradeRequiredReason))
		g.Expect(c.Message).To(ContainSubstring("own tooling"))
	}).Should(Succeed())

	g.Expect(setVersion("v1.36.0")).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := conditions.Get(getCP(ctx, g, cp), controlplanev1.YonderControlPlaneVersionUpToDateCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(controlplanev1.YonderControlPlaneVersionUpToDateReason))
	}).Should(Succeed())

	err := setVersion("1.36")
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec.version"))
}
