package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfig,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigs,versions=v1alpha1,name=default.yonderconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfig,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigs,versions=v1alpha1,name=validation.yonderconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderConfig defaults and validates YonderConfigs. The spec may change (CAPI never does; an operator
// fixing a stuck Machine may), but a rendered data Secret is not re-rendered except when its token is
// replaced.
func YonderConfig() webhooks.Defaulting[*bootstrapv1.YonderConfig] {
	return webhooks.WithDefaults(&webhooks.Validator[*bootstrapv1.YonderConfig]{
		Kind:     kind("YonderConfig"),
		Defaults: func(c *bootstrapv1.YonderConfig) { defaultSpec(&c.Spec) },
		Validate: func(c *bootstrapv1.YonderConfig) field.ErrorList { return validateSpec(&c.Spec, field.NewPath("spec")) },
	})
}
