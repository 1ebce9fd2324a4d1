package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachinetemplates,versions=v1alpha1,name=validation.yondermetalmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderMetalMachineTemplate validates YonderMetalMachineTemplates: the machine spec is valid; the
// template is immutable.
func YonderMetalMachineTemplate() *webhooks.Validator[*infrav1.YonderMetalMachineTemplate] {
	return webhooks.Template(kind("YonderMetalMachineTemplate"),
		func(t *infrav1.YonderMetalMachineTemplate) any { return t.Spec.Template.Spec },
		func(t *infrav1.YonderMetalMachineTemplate) field.ErrorList {
			return validateMachineSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
		}, "create a new template and point the MachineDeployment at it")
}
