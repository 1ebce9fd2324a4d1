package admission

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshcluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshclusters,versions=v1alpha1,name=validation.yondersshcluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshclustertemplates,versions=v1alpha1,name=validation.yondersshclustertemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHCluster validates YonderSSHClusters: the host selector parses; the control plane endpoint is
// immutable once set.
func YonderSSHCluster() *webhooks.Validator[*infrav1.YonderSSHCluster] {
	return webhooks.InfrastructureCluster(kind("YonderSSHCluster"),
		func(c *infrav1.YonderSSHCluster) *metav1.LabelSelector { return c.Spec.HostSelector.LabelSelector() },
		func(c *infrav1.YonderSSHCluster) clusterv1.APIEndpoint { return c.Spec.ControlPlaneEndpoint })
}

// YonderSSHClusterTemplate validates YonderSSHClusterTemplates: the host selector parses; the template
// is immutable.
func YonderSSHClusterTemplate() *webhooks.Validator[*infrav1.YonderSSHClusterTemplate] {
	return webhooks.Template(kind("YonderSSHClusterTemplate"),
		func(t *infrav1.YonderSSHClusterTemplate) any { return t.Spec.Template.Spec },
		func(t *infrav1.YonderSSHClusterTemplate) field.ErrorList {
			return webhooks.HostSelector(t.Spec.Template.Spec.HostSelector.LabelSelector(), field.NewPath("spec", "template", "spec", "hostSelector"))
		}, "create a new template and point the Cluster or ClusterClass at it")
}
