package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachinetemplates,versions=v1alpha1,name=validation.yondersshmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHMachineTemplate validates YonderSSHMachineTemplates.
type YonderSSHMachineTemplate struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderSSHMachineTemplate) ValidateCreate(_ context.Context, t *infrav1.YonderSSHMachineTemplate) (admission.Warnings, error) {
	return nil, invalid("YonderSSHMachineTemplate", t.Name, validateSelector(t.Spec.Template.Spec.HostSelector, field.NewPath("spec", "template", "spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderSSHMachineTemplate) ValidateUpdate(ctx context.Context, old, t *infrav1.YonderSSHMachineTemplate) (admission.Warnings, error) {
	p := field.NewPath("spec", "template", "spec")
	errs := validateSelector(t.Spec.Template.Spec.HostSelector, p.Child("hostSelector"))
	req, err := admission.RequestFromContext(ctx)
	dryRun := err == nil && topology.IsDryRunRequest(req, t)
	if !dryRun && !sameSpec(old.Spec.Template.Spec, t.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderSSHMachineTemplate spec is immutable: create a new template and point the MachineDeployment at it"))
	}
	return nil, invalid("YonderSSHMachineTemplate", t.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderSSHMachineTemplate) ValidateDelete(context.Context, *infrav1.YonderSSHMachineTemplate) (admission.Warnings, error) {
	return nil, nil
}
