package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines,versions=v1alpha1,name=validation.yondersshmachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHMachine validates YonderSSHMachines: the host selector parses and is immutable (CAPI replaces
// Machines instead); providerID is immutable once set.
func YonderSSHMachine() *webhooks.Validator[*infrav1.YonderSSHMachine] {
	p := field.NewPath("spec")
	return &webhooks.Validator[*infrav1.YonderSSHMachine]{
		Kind: kind("YonderSSHMachine"),
		Validate: func(m *infrav1.YonderSSHMachine) field.ErrorList {
			return webhooks.HostSelector(m.Spec.HostSelector.LabelSelector(), p.Child("hostSelector"))
		},
		Change: func(_ context.Context, old, m *infrav1.YonderSSHMachine) field.ErrorList {
			return append(webhooks.Unchanged(old.Spec.HostSelector, m.Spec.HostSelector, p.Child("hostSelector"), "is immutable"),
				webhooks.SetOnce(old.Spec.ProviderID, m.Spec.ProviderID, p.Child("providerID"))...)
		},
	}
}
