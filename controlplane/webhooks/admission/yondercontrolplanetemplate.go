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

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// YonderControlPlaneTemplate defaults and validates YonderControlPlaneTemplates.
type YonderControlPlaneTemplate struct{}

// SetupWebhookWithManager registers the webhooks.
func (w *YonderControlPlaneTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &controlplanev1.YonderControlPlaneTemplate{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplanetemplate,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanetemplates,versions=v1alpha1,name=default.yondercontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplanetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanetemplates,versions=v1alpha1,name=validation.yondercontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// Default fills the template's Secret key.
func (w *YonderControlPlaneTemplate) Default(_ context.Context, t *controlplanev1.YonderControlPlaneTemplate) error {
	defaultSpec(&t.Spec.Template.Spec)
	return nil
}

// ValidateCreate validates a new template.
func (w *YonderControlPlaneTemplate) ValidateCreate(_ context.Context, t *controlplanev1.YonderControlPlaneTemplate) (admission.Warnings, error) {
	return nil, templateError(t.Name, validateSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec")))
}

// ValidateUpdate rejects any change of spec.template.spec, except in the ClusterClass controller's
// dry-run requests (which compare a defaulted copy).
func (w *YonderControlPlaneTemplate) ValidateUpdate(ctx context.Context, oldT, newT *controlplanev1.YonderControlPlaneTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	p := field.NewPath("spec", "template", "spec")
	errs := validateSpec(&newT.Spec.Template.Spec, p)
	if !topology.IsDryRunRequest(req, newT) && !reflect.DeepEqual(oldT.Spec.Template.Spec, newT.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderControlPlaneTemplate spec.template.spec is immutable; create a new template and point the Cluster or ClusterClass at it"))
	}
	return nil, templateError(newT.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *YonderControlPlaneTemplate) ValidateDelete(context.Context, *controlplanev1.YonderControlPlaneTemplate) (admission.Warnings, error) {
	return nil, nil
}

func templateError(name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(controlplanev1.GroupVersion.WithKind("YonderControlPlaneTemplate").GroupKind(), name, errs)
}
