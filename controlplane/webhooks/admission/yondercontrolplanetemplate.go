package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplanetemplate,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanetemplates,versions=v1alpha1,name=default.yondercontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplanetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanetemplates,versions=v1alpha1,name=validation.yondercontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderControlPlaneTemplate defaults and validates YonderControlPlaneTemplates; spec.template.spec is
// immutable except in the ClusterClass controller's dry-runs (which compare a defaulted copy).
func YonderControlPlaneTemplate() webhooks.Defaulting[*controlplanev1.YonderControlPlaneTemplate] {
	v := webhooks.Template(kind("YonderControlPlaneTemplate"),
		func(t *controlplanev1.YonderControlPlaneTemplate) any { return t.Spec.Template.Spec },
		func(t *controlplanev1.YonderControlPlaneTemplate) field.ErrorList {
			return validateSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
		}, "create a new template and point the Cluster or ClusterClass at it")
	v.Defaults = func(t *controlplanev1.YonderControlPlaneTemplate) { defaultSpec(&t.Spec.Template.Spec) }
	return webhooks.WithDefaults(v)
}
