package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshcluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshclusters,versions=v1alpha1,name=validation.yondersshcluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshclustertemplates,versions=v1alpha1,name=validation.yondersshclustertemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHCluster validates YonderSSHClusters.
type YonderSSHCluster struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderSSHCluster) ValidateCreate(_ context.Context, c *infrav1.YonderSSHCluster) (admission.Warnings, error) {
	return nil, invalid("YonderSSHCluster", c.Name, validateSelector(c.Spec.HostSelector, field.NewPath("spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderSSHCluster) ValidateUpdate(_ context.Context, old, c *infrav1.YonderSSHCluster) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := validateSelector(c.Spec.HostSelector, p.Child("hostSelector"))
	if old.Spec.ControlPlaneEndpoint.IsValid() && old.Spec.ControlPlaneEndpoint != c.Spec.ControlPlaneEndpoint {
		errs = append(errs, field.Forbidden(p.Child("controlPlaneEndpoint"), "is immutable once set"))
	}
	return nil, invalid("YonderSSHCluster", c.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderSSHCluster) ValidateDelete(context.Context, *infrav1.YonderSSHCluster) (admission.Warnings, error) {
	return nil, nil
}

// YonderSSHClusterTemplate validates YonderSSHClusterTemplates.
type YonderSSHClusterTemplate struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderSSHClusterTemplate) ValidateCreate(_ context.Context, t *infrav1.YonderSSHClusterTemplate) (admission.Warnings, error) {
	return nil, invalid("YonderSSHClusterTemplate", t.Name, validateSelector(t.Spec.Template.Spec.HostSelector, field.NewPath("spec", "template", "spec", "hostSelector")))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderSSHClusterTemplate) ValidateUpdate(ctx context.Context, old, t *infrav1.YonderSSHClusterTemplate) (admission.Warnings, error) {
	p := field.NewPath("spec", "template", "spec")
	errs := validateSelector(t.Spec.Template.Spec.HostSelector, p.Child("hostSelector"))
	req, err := admission.RequestFromContext(ctx)
	dryRun := err == nil && topology.IsDryRunRequest(req, t)
	if !dryRun && !sameSpec(old.Spec.Template.Spec, t.Spec.Template.Spec) {
		errs = append(errs, field.Forbidden(p, "YonderSSHClusterTemplate spec is immutable"))
	}
	return nil, invalid("YonderSSHClusterTemplate", t.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderSSHClusterTemplate) ValidateDelete(context.Context, *infrav1.YonderSSHClusterTemplate) (admission.Warnings, error) {
	return nil, nil
}
