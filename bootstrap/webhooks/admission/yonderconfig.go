package admission

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
)

// YonderConfig defaults and validates YonderConfigs.
type YonderConfig struct{}

// SetupWebhookWithManager registers the webhooks.
func (w *YonderConfig) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.YonderConfig{}).WithDefaulter(w).WithValidator(w).Complete()
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfig,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigs,versions=v1alpha1,name=default.yonderconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1alpha1-yonderconfig,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigs,versions=v1alpha1,name=validation.yonderconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// Default fills defaults.
func (w *YonderConfig) Default(_ context.Context, c *bootstrapv1.YonderConfig) error {
	defaultSpec(&c.Spec)
	return nil
}

// ValidateCreate validates a new YonderConfig.
func (w *YonderConfig) ValidateCreate(_ context.Context, c *bootstrapv1.YonderConfig) (admission.Warnings, error) {
	return nil, invalid("YonderConfig", c.Name, validateSpec(&c.Spec, field.NewPath("spec")))
}

// ValidateUpdate validates a changed YonderConfig. The spec may change (CAPI never does; an operator
// fixing a stuck Machine may), but a rendered data Secret is not re-rendered except when its token is
// replaced.
func (w *YonderConfig) ValidateUpdate(_ context.Context, _, c *bootstrapv1.YonderConfig) (admission.Warnings, error) {
	return nil, invalid("YonderConfig", c.Name, validateSpec(&c.Spec, field.NewPath("spec")))
}

// ValidateDelete allows every deletion.
func (w *YonderConfig) ValidateDelete(context.Context, *bootstrapv1.YonderConfig) (admission.Warnings, error) {
	return nil, nil
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(bootstrapv1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
