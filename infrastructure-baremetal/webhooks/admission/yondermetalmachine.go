package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachines,versions=v1alpha1,name=validation.yondermetalmachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderMetalMachine validates YonderMetalMachines.
type YonderMetalMachine struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderMetalMachine) ValidateCreate(_ context.Context, m *infrav1.YonderMetalMachine) (admission.Warnings, error) {
	return nil, invalid("YonderMetalMachine", m.Name, validateMachineSpec(&m.Spec, field.NewPath("spec")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderMetalMachine) ValidateUpdate(_ context.Context, old, m *infrav1.YonderMetalMachine) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := validateMachineSpec(&m.Spec, p)
	// What the host was given and chosen by cannot change under a Machine: CAPI replaces Machines instead.
	if !sameSpec(old.Spec.HostSelector, m.Spec.HostSelector) {
		errs = append(errs, field.Forbidden(p.Child("hostSelector"), "is immutable"))
	}
	if !sameSpec(old.Spec.Image, m.Spec.Image) || !sameSpec(old.Spec.CustomDeploy, m.Spec.CustomDeploy) {
		errs = append(errs, field.Forbidden(p.Child("image"), "image and customDeploy are immutable: roll out a new YonderMetalMachineTemplate instead"))
	}
	if old.Spec.ProviderID != "" && old.Spec.ProviderID != m.Spec.ProviderID {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "is immutable once set"))
	}
	return nil, invalid("YonderMetalMachine", m.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderMetalMachine) ValidateDelete(context.Context, *infrav1.YonderMetalMachine) (admission.Warnings, error) {
	return nil, nil
}
