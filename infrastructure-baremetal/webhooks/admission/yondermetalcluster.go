package admission

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalcluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclusters,versions=v1alpha1,name=validation.yondermetalcluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclustertemplates,versions=v1alpha1,name=validation.yondermetalclustertemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderMetalCluster validates YonderMetalClusters: the host selector parses; the control plane
// endpoint is immutable once set.
func YonderMetalCluster() *webhooks.Validator[*infrav1.YonderMetalCluster] {
	return webhooks.InfrastructureCluster(kind("YonderMetalCluster"),
		func(c *infrav1.YonderMetalCluster) *metav1.LabelSelector { return c.Spec.HostSelector.LabelSelector() },
		func(c *infrav1.YonderMetalCluster) clusterv1.APIEndpoint { return c.Spec.ControlPlaneEndpoint })
}

// YonderMetalClusterTemplate validates YonderMetalClusterTemplates: the host selector parses; the
// template is immutable.
func YonderMetalClusterTemplate() *webhooks.Validator[*infrav1.YonderMetalClusterTemplate] {
	return webhooks.Template(kind("YonderMetalClusterTemplate"),
		func(t *infrav1.YonderMetalClusterTemplate) any { return t.Spec.Template.Spec },
		func(t *infrav1.YonderMetalClusterTemplate) field.ErrorList {
			return webhooks.HostSelector(t.Spec.Template.Spec.HostSelector.LabelSelector(), field.NewPath("spec", "template", "spec", "hostSelector"))
		}, "create a new template and point the Cluster or ClusterClass at it")
}
