package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachinetemplates,versions=v1alpha1,name=validation.yondersshmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHMachineTemplate validates YonderSSHMachineTemplates: the host selector parses; the template
// is immutable.
func YonderSSHMachineTemplate() *webhooks.Validator[*infrav1.YonderSSHMachineTemplate] {
	return webhooks.Template(kind("YonderSSHMachineTemplate"),
		func(t *infrav1.YonderSSHMachineTemplate) any { return t.Spec.Template.Spec },
		func(t *infrav1.YonderSSHMachineTemplate) field.ErrorList {
			return webhooks.HostSelector(t.Spec.Template.Spec.HostSelector.LabelSelector(), field.NewPath("spec", "template", "spec", "hostSelector"))
		}, "create a new template and point the MachineDeployment at it")
}
