package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines,versions=v1alpha1,name=validation.yondersshmachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHMachine validates YonderSSHMachines.
type YonderSSHMachine struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderSSHMachine) ValidateCreate(_ context.Context, m *infrav1.YonderSSHMachine) (admission.Warnings, error) {
	return nil, invalid("YonderSSHMachine", m.Name, validateSelector(m.Spec.HostSelector, field.NewPath("spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderSSHMachine) ValidateUpdate(_ context.Context, old, m *infrav1.YonderSSHMachine) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := validateSelector(m.Spec.HostSelector, p.Child("hostSelector"))
	if !sameSpec(old.Spec.HostSelector, m.Spec.HostSelector) {
		errs = append(errs, field.Forbidden(p.Child("hostSelector"), "is immutable"))
	}
	if old.Spec.ProviderID != "" && old.Spec.ProviderID != m.Spec.ProviderID {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "is immutable once set"))
	}
	return nil, invalid("YonderSSHMachine", m.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderSSHMachine) ValidateDelete(context.Context, *infrav1.YonderSSHMachine) (admission.Warnings, error) {
	return nil, nil
}
