package admission

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalremediation,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalremediations,versions=v1alpha1,name=validation.yondermetalremediation.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalremediationtemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalremediationtemplates,versions=v1alpha1,name=validation.yondermetalremediationtemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// minRemediationTimeout is infrav1.MinRemediationTimeout parsed.
var minRemediationTimeout = func() time.Duration {
	d, err := time.ParseDuration(infrav1.MinRemediationTimeout)
	if err != nil {
		panic(err)
	}
	return d
}()

// YonderMetalRemediation validates YonderMetalRemediations: the strategy (validateRemediationSpec), and
// the spec is fixed once the remediation exists, since its progress (status.retryCount against retryLimit,
// the timeout of the running attempt) was counted under it.
func YonderMetalRemediation() *webhooks.Validator[*infrav1.YonderMetalRemediation] {
	p := field.NewPath("spec")
	return &webhooks.Validator[*infrav1.YonderMetalRemediation]{
		Kind:     kind("YonderMetalRemediation"),
		Validate: func(r *infrav1.YonderMetalRemediation) field.ErrorList { return validateRemediationSpec(&r.Spec, p) },
		Change: func(_ context.Context, old, r *infrav1.YonderMetalRemediation) field.ErrorList {
			return webhooks.Unchanged(old.Spec, r.Spec, p, "is immutable: change the YonderMetalRemediationTemplate; the next remediation uses it")
		},
	}
}

// YonderMetalRemediationTemplate validates YonderMetalRemediationTemplates: the strategy. A template may
// change: a MachineHealthCheck reads it only when it creates a remediation, so a change applies to the
// remediations that start after it.
func YonderMetalRemediationTemplate() *webhooks.Validator[*infrav1.YonderMetalRemediationTemplate] {
	p := field.NewPath("spec", "template", "spec")
	return &webhooks.Validator[*infrav1.YonderMetalRemediationTemplate]{
		Kind: kind("YonderMetalRemediationTemplate"),
		Validate: func(t *infrav1.YonderMetalRemediationTemplate) field.ErrorList {
			return validateRemediationSpec(&t.Spec.Template.Spec, p)
		},
	}
}

// validateRemediationSpec repeats the schema's checks with messages that say what to write (a direct call,
// or a server whose CRD predates a rule, gets the same answer) and adds the timeout's: CEL cannot say
// whether a string is a duration before it compares it.
func validateRemediationSpec(s *infrav1.YonderMetalRemediationSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp := p.Child("strategy")
	if t := s.Strategy.Type; t != "" && t != infrav1.RebootRemediationStrategy {
		errs = append(errs, field.NotSupported(sp.Child("type"), t, []string{string(infrav1.RebootRemediationStrategy)}))
	}
	if n := s.Strategy.RetryLimit; n < 0 || n > 10 {
		errs = append(errs, field.Invalid(sp.Child("retryLimit"), n, "must be between 1 and 10 power cycles (leave it out for 1)"))
	}
	if d := s.Strategy.Timeout; d != nil && d.Duration < minRemediationTimeout {
		errs = append(errs, field.Invalid(sp.Child("timeout"), d.Duration.String(),
			fmt.Sprintf("must be at least %s (e.g. 10m): a host cannot power on, boot and report its Node Ready in less", infrav1.MinRemediationTimeout)))
	}
	return errs
}
