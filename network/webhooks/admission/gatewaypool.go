package admission

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-network-yonder-dev-v1alpha1-gatewaypool,mutating=false,failurePolicy=fail,sideEffects=None,groups=network.yonder.dev,resources=gatewaypools,verbs=create;update,versions=v1alpha1,name=validation.gatewaypool.network.yonder.dev,admissionReviewVersions=v1

// GatewayPool validates GatewayPools.
type GatewayPool struct {
	// Reader lists Sites and other GatewayPools (overlaps).
	Reader client.Reader
}

// ValidateCreate validates a new GatewayPool.
func (w *GatewayPool) ValidateCreate(ctx context.Context, p *netv1.GatewayPool) (admission.Warnings, error) {
	return w.validate(ctx, p)
}

// ValidateUpdate validates a changed GatewayPool.
func (w *GatewayPool) ValidateUpdate(ctx context.Context, _, p *netv1.GatewayPool) (admission.Warnings, error) {
	return w.validate(ctx, p)
}

// ValidateDelete allows deletion.
func (w *GatewayPool) ValidateDelete(context.Context, *netv1.GatewayPool) (admission.Warnings, error) {
	return nil, nil
}

func (w *GatewayPool) validate(ctx context.Context, p *netv1.GatewayPool) (admission.Warnings, error) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if _, err := metav1.LabelSelectorAsSelector(&p.Spec.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("nodeSelector"), p.Spec.NodeSelector, err.Error()))
	}
	errs = append(errs, kubeletProofKeys(spec.Child("nodeSelector"), &p.Spec.NodeSelector)...)
	if len(p.Spec.NodeSelector.MatchLabels) == 0 && len(p.Spec.NodeSelector.MatchExpressions) == 0 {
		errs = append(errs, field.Required(spec.Child("nodeSelector"), "an empty selector would make every Node of the Site a gateway; select the gateway Nodes"))
	}
	routed, e := parseCIDRs(spec.Child("routedCIDRs"), p.Spec.RoutedCIDRs)
	errs = append(errs, e...)
	errs = append(errs, overlaps(routed, nil, true)...)
	if len(errs) > 0 {
		return nil, invalid("GatewayPool", p.Name, errs)
	}
	sites, pools, err := listOthers(ctx, w.Reader)
	if err != nil {
		return nil, err
	}
	var others []cidr
	found := false
	for i := range sites {
		found = found || sites[i].Name == p.Spec.Site
		// A routed CIDR must not shadow any Site's pods or nodes, its own Site's included.
		others = append(others, siteCIDRs(&sites[i])...)
	}
	for i := range pools {
		// Pools of the same Site may share a routed network (two ways into the same LAN).
		if pools[i].Name != p.Name && pools[i].Spec.Site != p.Spec.Site {
			others = append(others, poolCIDRs(&pools[i])...)
		}
	}
	errs = append(errs, overlaps(routed, others, false)...)
	var warnings admission.Warnings
	if !found {
		warnings = append(warnings, "Site "+p.Spec.Site+" does not exist yet: the pool has no candidates until it does")
	}
	return warnings, invalid("GatewayPool", p.Name, errs)
}
