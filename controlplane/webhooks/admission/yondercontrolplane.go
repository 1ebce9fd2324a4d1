package admission

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// YonderControlPlane defaults and validates YonderControlPlanes.
type YonderControlPlane struct{}

// SetupWebhookWithManager registers the webhooks.
func (w *YonderControlPlane) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &controlplanev1.YonderControlPlane{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplane,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanes,versions=v1alpha1,name=default.yondercontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplane,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanes,versions=v1alpha1,name=validation.yondercontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// Default fills the Secret key.
func (w *YonderControlPlane) Default(_ context.Context, cp *controlplanev1.YonderControlPlane) error {
	defaultSpec(&cp.Spec)
	return nil
}

// ValidateCreate validates a new YonderControlPlane.
func (w *YonderControlPlane) ValidateCreate(_ context.Context, cp *controlplanev1.YonderControlPlane) (admission.Warnings, error) {
	return nil, toError(cp.Name, validateSpec(&cp.Spec, field.NewPath("spec")))
}

// ValidateUpdate validates a changed YonderControlPlane. The endpoint may be set once (by the reconciler
// or the user) and is then immutable: CAPI copies it into the Cluster, which does not follow changes.
func (w *YonderControlPlane) ValidateUpdate(_ context.Context, oldCP, newCP *controlplanev1.YonderControlPlane) (admission.Warnings, error) {
	errs := validateSpec(&newCP.Spec, field.NewPath("spec"))
	if oldCP.Spec.ControlPlaneEndpoint.IsValid() && oldCP.Spec.ControlPlaneEndpoint != newCP.Spec.ControlPlaneEndpoint {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "controlPlaneEndpoint"), "is immutable once set"))
	}
	return nil, toError(newCP.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *YonderControlPlane) ValidateDelete(context.Context, *controlplanev1.YonderControlPlane) (admission.Warnings, error) {
	return nil, nil
}

func defaultSpec(s *controlplanev1.YonderControlPlaneSpec) {
	if s.KubeconfigSecretRef.Key == "" {
		s.KubeconfigSecretRef.Key = controlplanev1.KubeconfigSecretKeyDefault
	}
}

func validateSpec(s *controlplanev1.YonderControlPlaneSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ep := s.ControlPlaneEndpoint
	epPath := p.Child("controlPlaneEndpoint")
	if ep.Host != "" && (ep.Port <= 0 || ep.Port > 65535) {
		errs = append(errs, field.Invalid(epPath.Child("port"), ep.Port, "must be between 1 and 65535 when host is set"))
	}
	if ep.Host == "" && ep.Port != 0 {
		errs = append(errs, field.Required(epPath.Child("host"), "must be set when port is set"))
	}
	return errs
}

func toError(name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(controlplanev1.GroupVersion.WithKind("YonderControlPlane").GroupKind(), name, errs)
}
