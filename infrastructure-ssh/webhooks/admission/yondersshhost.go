package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshhost,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,versions=v1alpha1,name=validation.yondersshhost.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHHost validates YonderSSHHosts: endpoints (and the bastion's) are usable; a claimed host keeps
// its address, and its claim is never handed to another consumer.
func YonderSSHHost() *webhooks.Validator[*infrav1.YonderSSHHost] {
	return &webhooks.Validator[*infrav1.YonderSSHHost]{Kind: kind("YonderSSHHost"), Validate: validateHost, Change: hostChange}
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

func hostChange(_ context.Context, old, h *infrav1.YonderSSHHost) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if old.Spec.ConsumerRef == nil || h.Spec.ConsumerRef == nil {
		return nil
	}
	if old.Spec.ConsumerRef.UID == h.Spec.ConsumerRef.UID {
		// A claimed host's identity must not change under its Machine.
		if old.Spec.Address != h.Spec.Address || old.Spec.Port != h.Spec.Port {
			errs = append(errs, field.Forbidden(p.Child("address"), "cannot change the address of a claimed host; delete its Machine first"))
		}
		return errs
	}
	// A claim can only be recorded on a free host or cleared; it cannot be handed to another consumer.
	return append(errs, field.Forbidden(p.Child("consumerRef"), "the host is claimed by "+old.Spec.ConsumerRef.Name+"; it must be released before another machine claims it"))
}

// validateEndpoint checks an SSH endpoint: its credentials Secret is local, its host key parses, and a
// key is pinned unless trust-on-first-use is asked for.
func validateEndpoint(e infrav1.SSHEndpoint, ns string, p *field.Path) field.ErrorList {
	errs := webhooks.LocalSecret(e.CredentialsSecretRef.Namespace, ns, p.Child("credentialsSecretRef", "namespace"))
	if e.HostKey != "" {
		if _, err := sshexec.ParseHostKey(e.HostKey); err != nil {
			errs = append(errs, field.Invalid(p.Child("hostKey"), e.HostKey, "must be one public key in authorized_keys format, e.g. the content of /etc/ssh/ssh_host_ed25519_key.pub"))
		}
	}
	if e.HostKey == "" && e.HostKeyPolicy != infrav1.HostKeyPolicyTrustOnFirstUse {
		errs = append(errs, field.Required(p.Child("hostKey"), "a host key must be pinned unless hostKeyPolicy is TrustOnFirstUse"))
	}
	return errs
}
