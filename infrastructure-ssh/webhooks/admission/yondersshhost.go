package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshhost,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,versions=v1alpha1,name=validation.yondersshhost.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHHost validates YonderSSHHosts.
type YonderSSHHost struct{}

// ValidateCreate implements admission.Validator.
func (w *YonderSSHHost) ValidateCreate(_ context.Context, h *infrav1.YonderSSHHost) (admission.Warnings, error) {
	return nil, invalid("YonderSSHHost", h.Name, validateHost(h))
}

// ValidateUpdate implements admission.Validator.
func (w *YonderSSHHost) ValidateUpdate(_ context.Context, old, h *infrav1.YonderSSHHost) (admission.Warnings, error) {
	errs := validateHost(h)
	p := field.NewPath("spec")
	// A claimed host's identity must not change under its Machine.
	if old.Spec.ConsumerRef != nil && h.Spec.ConsumerRef != nil && old.Spec.ConsumerRef.UID == h.Spec.ConsumerRef.UID {
		if old.Spec.Address != h.Spec.Address || old.Spec.Port != h.Spec.Port {
			errs = append(errs, field.Forbidden(p.Child("address"), "cannot change the address of a claimed host; delete its Machine first"))
		}
	}
	// A claim can only be recorded on a free host or cleared; it cannot be handed to another consumer.
	if old.Spec.ConsumerRef != nil && h.Spec.ConsumerRef != nil && old.Spec.ConsumerRef.UID != h.Spec.ConsumerRef.UID {
		errs = append(errs, field.Forbidden(p.Child("consumerRef"), "the host is claimed by "+old.Spec.ConsumerRef.Name+"; it must be released before another machine claims it"))
	}
	return nil, invalid("YonderSSHHost", h.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (w *YonderSSHHost) ValidateDelete(context.Context, *infrav1.YonderSSHHost) (admission.Warnings, error) {
	return nil, nil
}

func validateHost(h *infrav1.YonderSSHHost) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateEndpoint(h.Spec.SSHEndpoint, h.Namespace, p)
	if h.Spec.Bastion != nil {
		errs = append(errs, validateEndpoint(*h.Spec.Bastion, h.Namespace, p.Child("bastion"))...)
		if h.Spec.Bastion.HostKeyPolicy == infrav1.HostKeyPolicyTrustOnFirstUse && h.Spec.Bastion.HostKey == "" {
			errs = append(errs, field.Required(p.Child("bastion", "hostKey"), "a bastion's host key must be pinned (trust on first use is for hosts only)"))
		}
	}
	return errs
}
