package admission

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"sigs.k8s.io/cluster-api/util/topology"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
)

// YonderConfigTemplate defaults and validates YonderConfigTemplates.
type YonderConfigTemplate struct{}

// SetupWebhookWithManager registers the webhooks.
func (w *YonderConfigTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.YonderConfigTemplate{}).WithDefaulter(w).WithValidator(w).Complete()
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfigtemplate,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigtemplates,versions=v1alpha1,name=default.yonderconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfigtemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigtemplates,versions=v1alpha1,name=validation.yonderconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// Default fills the template's defaults.
func (w *YonderConfigTemplate) Default(_ context.Context, t *bootstrapv1.YonderConfigTemplate) error {
	defaultSpec(&t.Spec.Template.Spec)
	return nil
}

// ValidateCreate validates a new template.
func (w *YonderConfigTemplate) ValidateCreate(_ context.Context, t *bootstrapv1.YonderConfigTemplate) (admission.Warnings, error) {
	return nil, invalid("YonderConfigTemplate", t.Name, validateSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec")))
}

// ValidateUpdate rejects changes of spec.template.spec, except the ClusterClass controller's dry-runs.
func (w *YonderConfigTemplate) ValidateUpdate(ctx context.Context, oldT, newT *bootstrapv1.YonderConfigTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	p := field.NewPath("spec", "template", "spec")
	errs := validateSpec(&newT.Spec.Template.Spec, p)
	if !topology.IsDryRunRequest(req, newT) && !reflect.DeepEqual(oldT.Spec.Template.Spec, newT.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderConfigTemplate spec.template.spec is immutable; create a new template and point the MachineDeployment or ClusterClass at it"))
	}
	return nil, invalid("YonderConfigTemplate", newT.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *YonderConfigTemplate) ValidateDelete(context.Context, *bootstrapv1.YonderConfigTemplate) (admission.Warnings, error) {
	return nil, nil
}
