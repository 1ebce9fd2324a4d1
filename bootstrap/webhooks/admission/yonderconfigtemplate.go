package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfigtemplate,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigtemplates,versions=v1alpha1,name=default.yonderconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfigtemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigtemplates,versions=v1alpha1,name=validation.yonderconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderConfigTemplate defaults and validates YonderConfigTemplates; spec.template.spec is immutable
// except in the ClusterClass controller's dry-runs.
func YonderConfigTemplate() webhooks.Defaulting[*bootstrapv1.YonderConfigTemplate] {
	v := webhooks.Template(kind("YonderConfigTemplate"),
		func(t *bootstrapv1.YonderConfigTemplate) any { return t.Spec.Template.Spec },
		func(t *bootstrapv1.YonderConfigTemplate) field.ErrorList {
			return validateSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
		}, "create a new template and point the MachineDeployment or ClusterClass at it")
	v.Defaults = func(t *bootstrapv1.YonderConfigTemplate) { defaultSpec(&t.Spec.Template.Spec) }
	return webhooks.WithDefaults(v)
}
