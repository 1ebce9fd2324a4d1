package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachinetemplates,versions=v1alpha1,name=validation.yondermetalmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderMetalMachineTemplate validates YonderMetalMachineTemplates.
type YonderMetalMachineTemplate struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderMetalMachineTemplate) ValidateCreate(_ context.Context, t *infrav1.YonderMetalMachineTemplate) (admission.Warnings, error) {
	return nil, invalid("YonderMetalMachineTemplate", t.Name, validateMachineSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderMetalMachineTemplate) ValidateUpdate(ctx context.Context, old, t *infrav1.YonderMetalMachineTemplate) (admission.Warnings, error) {
	p := field.NewPath("spec", "template", "spec")
	errs := validateMachineSpec(&t.Spec.Template.Spec, p)
	req, err := admission.RequestFromContext(ctx)
	dryRun := err == nil && topology.IsDryRunRequest(req, t)
	if !dryRun && !sameSpec(old.Spec.Template.Spec, t.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderMetalMachineTemplate spec is immutable: create a new template and point the MachineDeployment at it"))
	}
	return nil, invalid("YonderMetalMachineTemplate", t.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderMetalMachineTemplate) ValidateDelete(context.Context, *infrav1.YonderMetalMachineTemplate) (admission.Warnings, error) {
	return nil, nil
}
