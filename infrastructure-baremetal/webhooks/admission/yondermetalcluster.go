package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalcluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclusters,versions=v1alpha1,name=validation.yondermetalcluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalclustertemplates,versions=v1alpha1,name=validation.yondermetalclustertemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderMetalCluster validates YonderMetalClusters.
type YonderMetalCluster struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderMetalCluster) ValidateCreate(_ context.Context, c *infrav1.YonderMetalCluster) (admission.Warnings, error) {
	return nil, invalid("YonderMetalCluster", c.Name, validateSelector(c.Spec.HostSelector, field.NewPath("spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderMetalCluster) ValidateUpdate(_ context.Context, old, c *infrav1.YonderMetalCluster) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := validateSelector(c.Spec.HostSelector, p.Child("hostSelector"))
	if old.Spec.ControlPlaneEndpoint.IsValid() && old.Spec.ControlPlaneEndpoint != c.Spec.ControlPlaneEndpoint {
		errs = append(errs, field.Forbidden(p.Child("controlPlaneEndpoint"), "is immutable once set"))
	}
	return nil, invalid("YonderMetalCluster", c.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderMetalCluster) ValidateDelete(context.Context, *infrav1.YonderMetalCluster) (admission.Warnings, error) {
	return nil, nil
}

// YonderMetalClusterTemplate validates YonderMetalClusterTemplates.
type YonderMetalClusterTemplate struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderMetalClusterTemplate) ValidateCreate(_ context.Context, t *infrav1.YonderMetalClusterTemplate) (admission.Warnings, error) {
	return nil, invalid("YonderMetalClusterTemplate", t.Name, validateSelector(t.Spec.Template.Spec.HostSelector, field.NewPath("spec", "template", "spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderMetalClusterTemplate) ValidateUpdate(ctx context.Context, old, t *infrav1.YonderMetalClusterTemplate) (admission.Warnings, error) {
	p := field.NewPath("spec", "template", "spec")
	errs := validateSelector(t.Spec.Template.Spec.HostSelector, p.Child("hostSelector"))
	req, err := admission.RequestFromContext(ctx)
	dryRun := err == nil && topology.IsDryRunRequest(req, t)
	if !dryRun && !sameSpec(old.Spec.Template.Spec, t.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderMetalClusterTemplate spec is immutable"))
	}
	return nil, invalid("YonderMetalClusterTemplate", t.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderMetalClusterTemplate) ValidateDelete(context.Context, *infrav1.YonderMetalClusterTemplate) (admission.Warnings, error) {
	return nil, nil
}
