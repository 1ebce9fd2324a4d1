package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplane,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanes,versions=v1alpha1,name=default.yondercontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1alpha1-yondercontrolplane,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanes,versions=v1alpha1,name=validation.yondercontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderControlPlane defaults and validates YonderControlPlanes. The endpoint may be set once (by the
// reconciler or the user) and is then immutable: CAPI copies it into the Cluster, which does not follow
// changes.
func YonderControlPlane() webhooks.Defaulting[*controlplanev1.YonderControlPlane] {
	p := field.NewPath("spec")
	return webhooks.WithDefaults(&webhooks.Validator[*controlplanev1.YonderControlPlane]{
		Kind:     kind("YonderControlPlane"),
		Defaults: func(cp *controlplanev1.YonderControlPlane) { defaultSpec(&cp.Spec) },
		Validate: func(cp *controlplanev1.YonderControlPlane) field.ErrorList { return validateSpec(&cp.Spec, p) },
		Change: func(_ context.Context, old, cp *controlplanev1.YonderControlPlane) field.ErrorList {
			return webhooks.EndpointSetOnce(old.Spec.ControlPlaneEndpoint, cp.Spec.ControlPlaneEndpoint, p.Child("controlPlaneEndpoint"))
		},
	})
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
