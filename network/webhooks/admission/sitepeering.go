package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-network-yonder-dev-v1alpha1-sitepeering,mutating=false,failurePolicy=fail,sideEffects=None,groups=network.yonder.dev,resources=sitepeerings,verbs=create;update,versions=v1alpha1,name=validation.sitepeering.network.yonder.dev,admissionReviewVersions=v1

// SitePeering validates SitePeerings.
type SitePeering struct{}

// ValidateCreate validates a new SitePeering.
func (w *SitePeering) ValidateCreate(_ context.Context, p *netv1.SitePeering) (admission.Warnings, error) {
	return nil, validatePeering(p)
}

// ValidateUpdate validates a changed SitePeering.
func (w *SitePeering) ValidateUpdate(_ context.Context, _, p *netv1.SitePeering) (admission.Warnings, error) {
	return nil, validatePeering(p)
}

// ValidateDelete allows deletion.
func (w *SitePeering) ValidateDelete(context.Context, *netv1.SitePeering) (admission.Warnings, error) {
	return nil, nil
}

func validatePeering(p *netv1.SitePeering) error {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, s := range p.Spec.Sites {
		for _, msg := range validation.IsDNS1123Label(s) {
			errs = append(errs, field.Invalid(spec.Child("sites").Index(i), s, msg))
		}
		if seen[s] {
			errs = append(errs, field.Duplicate(spec.Child("sites").Index(i), s))
		}
		seen[s] = true
	}
	if len(seen) < 2 {
		errs = append(errs, field.Invalid(spec.Child("sites"), p.Spec.Sites, "a peering connects at least two distinct Sites"))
	}
	if p.Spec.Topology == netv1.TopologyFullMesh && len(p.Spec.GatewayPools) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("gatewayPools"), "gateway pools carry only Gateway topology links; remove them or use topology Gateway"))
	}
	if p.Spec.Topology == netv1.TopologyFullMesh && p.Spec.Relay == netv1.RelayAlways {
		errs = append(errs, field.Forbidden(spec.Child("relay"), "only Gateway topology links are relayed; use topology Gateway or relay Auto"))
	}
	return invalid("SitePeering", p.Name, errs)
}
